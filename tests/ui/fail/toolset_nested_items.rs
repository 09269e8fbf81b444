use toolgate::{Denied, toolset};

#[toolset(domain = "users")]
pub mod users {
    use toolgate::Denied;

    pub mod admin {
        use toolgate::Denied;

        pub fn purge_all() -> Result<(), Denied> {
            Ok(())
        }
    }

    pub struct Store;

    impl Store {
        pub fn wipe(&self) -> Result<(), Denied> {
            Ok(())
        }

        fn private_helper(&self) {}
    }

    pub trait Cleanup {
        fn clean(&self) -> Result<(), Denied> {
            Ok(())
        }

        fn required(&self);
    }
}

fn main() {
    let _: Result<(), Denied> = Ok(());
}
