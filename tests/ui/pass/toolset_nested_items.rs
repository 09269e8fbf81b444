// A #[toolset]'s rule reaches nested modules and impl blocks, and a macro call marked #[tool(skip)];
// associated functions of a toolset impl can be callable.
use toolgate::{Denied, Gate, Mode, toolset};

macro_rules! helpers {
    () => {
        pub fn cache_size(&self) -> usize {
            0
        }
    };
}

#[toolset(domain = "users")]
pub mod users {
    use toolgate::Denied;

    pub mod admin {
        use toolgate::Denied;

        /// Count the admins.
        #[tool(risk = "READ_ONLY", callable)]
        pub fn count_admins() -> Result<u32, Denied> {
            Ok(1)
        }
    }

    pub struct Store;

    impl Store {
        /// Count the users.
        #[tool(risk = "READ_ONLY", callable)]
        pub fn count() -> Result<u32, Denied> {
            Ok(2)
        }

        #[tool(skip)]
        pub fn new() -> Store {
            Store
        }
    }

    pub trait Describe {
        #[tool(skip)]
        fn describe(&self) -> String {
            String::new()
        }
    }
}

pub struct Users;

#[toolset(domain = "people")]
impl Users {
    /// Count the people.
    #[tool(risk = "READ_ONLY")]
    pub fn count(&self) -> Result<usize, Denied> {
        Ok(3)
    }

    #[tool(skip)]
    helpers!();
}

fn main() {
    let gate = Gate::new(Mode::Shadow).unwrap();
    let by_name = |id: &str| {
        toolgate::registry()
            .call(&gate, id, serde_json::json!({}))
            .now()
            .unwrap()
            .unwrap()
    };
    assert_eq!(by_name("users.count_admins"), serde_json::json!(1));
    assert_eq!(by_name("users.count"), serde_json::json!(2));
    assert_eq!(gate.run(|| Users.count()).unwrap(), 3);
    assert_eq!(Users.cache_size(), 0);
    let _ = users::Store::new();
}
