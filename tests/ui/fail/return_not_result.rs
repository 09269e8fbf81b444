use toolgate::tool;

#[tool(risk = "READ_ONLY")]
fn count_users() -> u64 {
    3
}

fn main() {}
