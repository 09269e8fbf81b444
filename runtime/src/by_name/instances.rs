//! The values that stateful tools are called on by name: one shared instance per type.

use std::any::{Any, TypeId};
use std::fmt;
use std::sync::Arc;

/// The instances that stateful tools are called on by name: a method of a `#[toolset]` impl declared
/// `callable` (`&self`) runs on the instance of its type held here.
///
/// A call by name has no `self` of its own: the application says once which value each type's tools
/// run on (the struct holding a database pool, an HTTP client), and every call by name and over MCP uses
/// it, through the same gate as a direct call. One instance per type; a later one replaces the earlier.
///
/// ```
/// # extern crate toolgate_runtime;
/// # mod toolgate { pub mod registry { pub use toolgate_runtime::Instances; } }
/// use std::sync::Arc;
/// use toolgate::registry::Instances;
///
/// struct Users { pool: Vec<String> }
///
/// let users = Arc::new(Users { pool: vec!["ada".into()] });
/// let instances = Instances::new().with_shared(Arc::clone(&users));
/// assert!(Arc::ptr_eq(&instances.get::<Users>().unwrap(), &users));
/// assert!(instances.get::<String>().is_none());
/// ```
#[derive(Clone, Default)]
pub struct Instances {
    /// Few types, each looked up by a comparison of ids: a vector is enough.
    by_type: Vec<Held>,
}

#[derive(Clone)]
struct Held {
    type_id: TypeId,
    type_name: &'static str,
    /// What the instance is, for approvals: a two-step approval of a call on it is bound to this label,
    /// and operators read it among the call's arguments.
    label: Arc<String>,
    value: Arc<dyn Any + Send + Sync>,
}

/// A type's name as operators read it: `std::any::type_name` without the paths of its modules
/// (`Ops`, `Pool<Conn>`), which say where it is written, not what it is.
pub(crate) fn short_type_name(type_name: &str) -> String {
    let mut short = String::with_capacity(type_name.len());
    let mut segment = String::new();
    let mut chars = type_name.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            segment.clear();
        } else if c.is_alphanumeric() || c == '_' {
            segment.push(c);
        } else {
            short.push_str(&segment);
            segment.clear();
            short.push(c);
        }
    }
    short.push_str(&segment);
    short
}

/// The label of an instance the application named: the name, and its type's.
pub(crate) fn named_label(name: String, type_name: &str) -> String {
    format!("{name} ({})", short_type_name(type_name))
}

/// The label of an instance the application did not name: its type and a random registration id, so
/// that an approval given for a call on it is never used for a call on another instance.
pub(crate) fn registration_label(type_name: &str) -> String {
    let mut bytes = [0_u8; 4];
    if getrandom::fill(&mut bytes).is_err() {
        panic!("the operating system's random number generator failed");
    }
    let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{} (instance {id})", short_type_name(type_name))
}

impl Instances {
    /// No instance: only free functions (and methods without `self`) can be called.
    pub const fn new() -> Instances {
        Instances {
            by_type: Vec::new(),
        }
    }

    /// Adds `instance` as the value its type's tools run on.
    #[must_use]
    pub fn with<T: Send + Sync + 'static>(self, instance: T) -> Instances {
        self.with_shared(Arc::new(instance))
    }

    /// Adds an instance the application shares with other code.
    #[must_use]
    pub fn with_shared<T: Send + Sync + 'static>(mut self, instance: Arc<T>) -> Instances {
        self.insert(instance);
        self
    }

    /// Adds `instance` under a name the application gives it, which operators read when they approve a
    /// call on it (`"self": "prod-cloud (ops::Cloud)"`), and to which two-step approvals of calls on
    /// it are bound.
    ///
    /// An unnamed instance is labelled with its type and a random id, so an approval is bound to that
    /// registration in this process. Name it where approvals must carry over between processes that
    /// hold the same instance (several replicas behind one PostgreSQL approval store): the name then
    /// says that the instances are the same thing. Give two different instances two different names.
    #[must_use]
    pub fn with_named<T: Send + Sync + 'static>(
        mut self,
        name: impl Into<String>,
        instance: T,
    ) -> Instances {
        let label = named_label(name.into(), std::any::type_name::<T>());
        self.put(Arc::new(instance), label);
        self
    }

    /// Adds an instance, returning the one it replaces.
    pub fn insert<T: Send + Sync + 'static>(&mut self, instance: Arc<T>) -> Option<Arc<T>> {
        let label = registration_label(std::any::type_name::<T>());
        self.put(instance, label)
    }

    /// The label of the instance of `T`: what operators read as the method's `self` when they approve
    /// a call on it.
    pub fn label<T: Send + Sync + 'static>(&self) -> Option<&str> {
        self.by_type
            .iter()
            .find(|h| h.type_id == TypeId::of::<T>())
            .map(|h| h.label.as_str())
    }

    fn put<T: Send + Sync + 'static>(&mut self, instance: Arc<T>, label: String) -> Option<Arc<T>> {
        let held = Held {
            type_id: TypeId::of::<T>(),
            type_name: std::any::type_name::<T>(),
            label: Arc::new(label),
            value: instance,
        };
        match self.by_type.iter_mut().find(|h| h.type_id == held.type_id) {
            Some(slot) => {
                let old = std::mem::replace(slot, held);
                old.value.downcast::<T>().ok()
            }
            None => {
                self.by_type.push(held);
                None
            }
        }
    }

    /// The instance of `T`, if there is one.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        let held = self
            .by_type
            .iter()
            .find(|h| h.type_id == TypeId::of::<T>())?;
        Arc::clone(&held.value).downcast::<T>().ok()
    }

    /// The instance of `T` and its label.
    pub(crate) fn get_labelled<T: Send + Sync + 'static>(&self) -> Option<(Arc<T>, Arc<String>)> {
        let held = self
            .by_type
            .iter()
            .find(|h| h.type_id == TypeId::of::<T>())?;
        let value = Arc::clone(&held.value).downcast::<T>().ok()?;
        Some((value, Arc::clone(&held.label)))
    }

    /// The label of the instance of the type `type_id`, if one is held.
    #[cfg_attr(not(feature = "mcp"), allow(dead_code))]
    pub(crate) fn label_of(&self, type_id: TypeId) -> Option<&str> {
        self.by_type
            .iter()
            .find(|h| h.type_id == type_id)
            .map(|h| h.label.as_str())
    }

    /// Whether an instance of the type `type_id` is held.
    pub(crate) fn holds(&self, type_id: TypeId) -> bool {
        self.by_type.iter().any(|h| h.type_id == type_id)
    }
}

impl fmt::Debug for Instances {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries(self.by_type.iter().map(|h| h.type_name))
            .finish()
    }
}

/// The type a stateful tool runs on, as its adapter registers it.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct Receiver {
    pub type_id: fn() -> TypeId,
    pub type_name: fn() -> &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_instance_per_type_the_later_replacing_the_earlier() {
        let mut instances = Instances::new().with(1u8).with(String::from("a"));
        assert_eq!(*instances.get::<u8>().unwrap(), 1);
        let old = instances.insert(Arc::new(2u8)).unwrap();
        assert_eq!((*old, *instances.get::<u8>().unwrap()), (1, 2));
        assert_eq!(instances.get::<String>().unwrap().as_str(), "a");
        assert!(instances.get::<u16>().is_none());
        assert!(instances.holds(TypeId::of::<String>()));
        assert!(!instances.holds(TypeId::of::<u16>()));
        assert_eq!(
            format!("{instances:?}"),
            r#"{"u8", "alloc::string::String"}"#
        );
    }

    #[test]
    fn a_type_is_named_without_the_paths_of_its_modules() {
        for (full, short) in [
            ("cloudops_gated::CloudOps", "CloudOps"),
            ("Ops", "Ops"),
            ("a::b::Pool<c::Conn, d::e::Key>", "Pool<Conn, Key>"),
            (
                "alloc::sync::Arc<dyn core::any::Any + Send>",
                "Arc<dyn Any + Send>",
            ),
            ("(a::X, [b::Y; 2])", "(X, [Y; 2])"),
            ("&'static str", "&'static str"),
        ] {
            assert_eq!(short_type_name(full), short, "{full}");
        }
    }
}
