use toolgate::toolset;

pub struct Users;

#[toolset(domain = "users")]
impl Users {
    #[tool(skip, risk = "READ_ONLY")]
    pub fn cache_size(&self) -> usize {
        0
    }
}

fn main() {
    let _ = Users.cache_size();
}
