use toolgate::tool as declare;
use toolgate::{Denied, toolset};

pub struct Users;

pub trait Directory {
    fn size(&self) -> Result<usize, Denied>;
}

#[toolset(domain = "users")]
impl Users {
    /// Count the users.
    #[tool(risk = "READ_ONLY", callable)]
    pub fn count(&self) -> Result<usize, Denied> {
        Ok(3)
    }

    /// Count the users, through an attribute the set cannot read.
    #[declare(risk = "READ_ONLY", callable)]
    pub fn count_renamed(&self) -> Result<usize, Denied> {
        Ok(3)
    }

    /// Count the users, with `self: &Self`.
    #[tool(risk = "READ_ONLY", callable)]
    pub async fn count_async(self: &Self) -> Result<usize, Denied> {
        Ok(3)
    }
}

#[toolset(domain = "directory")]
impl Directory for Users {
    /// The directory's size.
    #[tool(risk = "READ_ONLY", callable)]
    fn size(&self) -> Result<usize, Denied> {
        Ok(3)
    }
}

fn main() {
    let tool = toolgate::registry().get("users.count").unwrap();
    assert_eq!(tool.instance_type(), Some(std::any::type_name::<Users>()));
    let tool = toolgate::registry().get("users.count_renamed").unwrap();
    assert_eq!(tool.instance_type(), Some(std::any::type_name::<Users>()));
    let tool = toolgate::registry().get("directory.size").unwrap();
    assert_eq!(tool.instance_type(), Some(std::any::type_name::<Users>()));
}
