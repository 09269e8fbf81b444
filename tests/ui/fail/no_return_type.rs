use toolgate::tool;

#[tool(risk = "LOW_WRITE")]
fn touch_user(id: u64) {
    let _ = id;
}

fn main() {}
