use toolgate::tool;

#[tool(skip)]
fn cache_size() -> usize {
    0
}

fn main() {
    let _ = cache_size();
}
