use toolgate::toolset;

#[toolset(domain = "users")]
#[path = "support/users.rs"]
mod users;

fn main() {}
