use toolgate::tool;

#[tool(risk = "READ_ONLY")]
pub struct GetUser {
    pub id: u64,
}

fn main() {
    let _ = GetUser { id: 1 };
}
