use toolgate::toolset;

#[toolset(domain = "users")]
pub struct Users;

fn main() {
    let _ = Users;
}
