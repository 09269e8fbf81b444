//! What a call brings to its decision besides the tool: an escalated risk, and its arguments as JSON.
//!
//! The arguments are written only when something needs them (an audit sink, an approver, a two-step
//! approval), so an unaudited call that needs no approval never serializes anything.

use std::borrow::Borrow;
use std::marker::PhantomData;

use serde::Serialize;

use crate::approval::effects::Rollback;
use crate::canonical::sha256_hex;
use toolgate_policy::Risk;

/// The per-call facts generated code passes to the gate.
#[doc(hidden)]
#[derive(Clone, Copy, Default)]
pub struct CallInfo<'a> {
    /// What the tool's `escalate` function returned for these arguments.
    pub escalated: Option<Risk>,
    /// The arguments, in the order of their names.
    pub arguments: &'a [ArgRef<'a>],
    /// The tool opted in to recording its arguments in the audit log.
    pub record_arguments: bool,
    /// What a tool with lasting effects adds: its target, its rollback plan, its evidence probe.
    pub effects: Option<&'a Effects<'a>>,
}

/// What generated code hands the gate of a call of a tool that declares `target`, `rollback`,
/// `evidence` or `irreversible`.
#[doc(hidden)]
pub struct Effects<'a> {
    /// The `target` argument.
    pub target: Option<ArgRef<'a>>,
    /// The tool's `rollback` function over the arguments: the plan, or why there is none. Made only
    /// once the gates' tables allow the call.
    pub rollback: Option<&'a (dyn Fn() -> Result<Rollback, String> + 'a)>,
    /// The tool's `evidence` probe of its target.
    pub evidence: Option<&'a (dyn Fn() -> Result<serde_json::Value, String> + 'a)>,
}

impl Effects<'_> {
    /// The target's value; `Err` where it cannot be read (not serializable).
    pub(crate) fn target(&self) -> Option<Result<serde_json::Value, String>> {
        let target = self.target.as_ref()?;
        Some(match target.value {
            ArgValue::Json(value) | ArgValue::Redacted(Some(value)) => value
                .to_value()
                .map_err(|e| format!("its target `{}` cannot be written: {e}", target.name)),
            _ => Err(format!(
                "its target `{}` cannot be read (it is not serializable)",
                target.name
            )),
        })
    }
}

/// The risk a call is judged at. The only way to make one takes the maximum, so an escalation can raise
/// a tool's declared risk and never lower it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EffectiveRisk(Risk);

impl EffectiveRisk {
    pub(crate) fn new(declared: Risk, escalated: Option<Risk>) -> EffectiveRisk {
        EffectiveRisk(escalated.map_or(declared, |e| declared.max(e)))
    }

    pub(crate) fn get(self) -> Risk {
        self.0
    }
}

/// The arguments of one call, as canonical-enough JSON and its digest.
#[derive(Debug, Clone)]
pub(crate) struct Arguments {
    /// The JSON the audit log gets: a redacted argument reads `"[REDACTED]"`, one that is not
    /// serializable (a method's receiver holding a pool) `"[NOT SERIALIZABLE]"`.
    pub(crate) json: String,
    /// The digest of `json`, which the audit log and approvers see: worked out at the first need,
    /// since a decision that only reads the arguments (an operator's argument rules) needs none.
    digest: std::sync::OnceLock<String>,
    /// The arguments with the redacted ones' real values, where some are redacted or not serializable
    /// (`Some(None)` when one is not serializable): what a two-step approval is bound to. Never written
    /// or shown.
    unredacted: Option<Option<String>>,
    /// An argument is not serializable: its JSON is a placeholder, the same for every value, so the
    /// digest tells no two calls apart and is shown to no one.
    opaque: bool,
}

impl Arguments {
    /// The digest of the JSON the log gets.
    pub(crate) fn digest(&self) -> &str {
        self.digest.get_or_init(|| sha256_hex(self.json.as_bytes()))
    }

    /// The digest approvers and the audit log see: `None` where an argument is not serializable.
    pub(crate) fn shown_digest(&self) -> Option<&str> {
        (!self.opaque).then(|| self.digest())
    }
}

// The digest follows from the JSON: whether it was worked out yet tells two arguments no apart.
impl PartialEq for Arguments {
    fn eq(&self, other: &Arguments) -> bool {
        (&self.json, &self.unredacted, self.opaque)
            == (&other.json, &other.unredacted, other.opaque)
    }
}

impl Eq for Arguments {}

impl CallInfo<'_> {
    /// The call's arguments, or `None` when one is bound by a pattern rather than a name.
    pub(crate) fn arguments(&self) -> Option<Arguments> {
        let json = self.write(false)?;
        // What the log shows hides redacted values and cannot show opaque ones: the binding is then
        // written apart, with the real values, and is impossible where one is opaque.
        let redacts = self.arguments.iter().any(|arg| match arg.value {
            ArgValue::Redacted(_) | ArgValue::Opaque => true,
            ArgValue::Whole(full, shown) => !std::ptr::eq(full, shown),
            ArgValue::Json(_) | ArgValue::Unnamed => false,
        });
        let opaque = self
            .arguments
            .iter()
            .any(|arg| matches!(arg.value, ArgValue::Opaque));
        Some(Arguments {
            json,
            digest: std::sync::OnceLock::new(),
            unredacted: redacts.then(|| self.write(true)),
            opaque,
        })
    }

    /// The digest a two-step approval is bound to: the arguments with the real values of redacted ones,
    /// and each argument's type; `None` when a redacted argument is not serializable. Worked out only
    /// for a two-step approval: it is never written or shown, since a digest of a short secret would give
    /// the secret away.
    pub(crate) fn binding(&self, arguments: &Arguments) -> Option<String> {
        let mut full = match &arguments.unredacted {
            Some(unredacted) => unredacted.clone()?,
            None => arguments.json.clone(),
        };
        for arg in self.arguments {
            if let ArgValue::Json(value) | ArgValue::Redacted(Some(value)) = arg.value {
                full.push('\n');
                full.push_str(value.type_name());
            }
        }
        Some(sha256_hex(full.as_bytes()))
    }

    /// The value of the argument `name` as the operator's argument rules read it: `null` where the call
    /// has no such argument, the log's placeholder where it is redacted or not serializable; `None`
    /// where it cannot be read (bound by a pattern, or its serialization failed). Read from the argument
    /// itself at each call, so that a value behind a shared handle is read as it is now.
    pub(crate) fn value(&self, name: &str) -> Option<serde_json::Value> {
        // Compared inline: parameter names are short, and a call of `memcmp` per argument costs more
        // than the comparison.
        let same =
            |a: &str| a.len() == name.len() && a.bytes().zip(name.bytes()).all(|(a, b)| a == b);
        if let [
            ArgRef {
                value: ArgValue::Whole(_, shown),
                ..
            },
        ] = self.arguments
        {
            return Some(shown.get(name).cloned().unwrap_or_default());
        }
        let Some(arg) = self.arguments.iter().find(|arg| same(arg.name)) else {
            // A parameter bound by a pattern may be the one the rule names.
            let unnamed = self
                .arguments
                .iter()
                .any(|arg| matches!(arg.value, ArgValue::Unnamed));
            return (!unnamed).then_some(serde_json::Value::Null);
        };
        match arg.value {
            ArgValue::Json(value) => value.to_value().ok(),
            ArgValue::Redacted(_) => Some(serde_json::Value::from("[REDACTED]")),
            ArgValue::Opaque => Some(serde_json::Value::from("[NOT SERIALIZABLE]")),
            ArgValue::Unnamed | ArgValue::Whole(..) => None,
        }
    }

    /// The arguments as a JSON object, the redacted ones with their value if `unredacted`; `None` when
    /// an argument to write is not serializable.
    fn write(&self, unredacted: bool) -> Option<String> {
        let mut buf = Vec::with_capacity(64);
        if let [
            ArgRef {
                value: ArgValue::Whole(full, shown),
                ..
            },
        ] = self.arguments
        {
            crate::canonical::write(if unredacted { full } else { shown }, &mut buf);
            return String::from_utf8(buf).ok();
        }
        buf.push(b'{');
        for (i, arg) in self.arguments.iter().enumerate() {
            let value = match arg.value {
                ArgValue::Json(value) => Ok(value),
                ArgValue::Redacted(_) if !unredacted => Err(&b"\"[REDACTED]\""[..]),
                ArgValue::Opaque if !unredacted => Err(&b"\"[NOT SERIALIZABLE]\""[..]),
                ArgValue::Redacted(Some(value)) => Ok(value),
                ArgValue::Redacted(None)
                | ArgValue::Opaque
                | ArgValue::Unnamed
                | ArgValue::Whole(..) => return None,
            };
            if i > 0 {
                buf.push(b',');
            }
            buf.push(b'"');
            buf.extend_from_slice(arg.name.as_bytes());
            buf.extend_from_slice(b"\":");
            match value {
                Ok(value) => value.write_json(&mut buf).ok()?,
                Err(marker) => buf.extend_from_slice(marker),
            }
        }
        buf.push(b'}');
        String::from_utf8(buf).ok()
    }
}

/// One argument of a call, as generated code hands it to the gate: built only when the gate needs to
/// look at the arguments, from a reference to the argument itself.
#[doc(hidden)]
#[derive(Clone, Copy)]
pub struct ArgRef<'a> {
    name: &'static str,
    value: ArgValue<'a>,
}

#[derive(Clone, Copy)]
enum ArgValue<'a> {
    Json(&'a dyn ToJson),
    /// Named in the tool's `redact` list: the value, if serializable, is read only for approvals.
    Redacted(Option<&'a dyn ToJson>),
    Opaque,
    Unnamed,
    /// Every argument of the call at once, as JSON objects: as the call has them, and as they are
    /// shown, redacted (the same object where nothing is): a call handed its arguments as JSON.
    Whole(&'a serde_json::Value, &'a serde_json::Value),
}

impl<'a> ArgRef<'a> {
    /// An argument the runtime itself hands to a decision: a call's JSON arguments, or the label of
    /// the instance a method runs on.
    pub(crate) fn json<T: Serialize>(name: &'static str, value: &'a T) -> ArgRef<'a> {
        ArgRef {
            name,
            value: ArgValue::Json(value),
        }
    }

    /// Every argument of a call at once, `full` a JSON object of them by name and `shown` the same with
    /// the redacted ones hidden (or `full` itself): the only [`ArgRef`] of its call.
    pub(crate) fn whole(full: &'a serde_json::Value, shown: &'a serde_json::Value) -> ArgRef<'a> {
        ArgRef {
            name: "",
            value: ArgValue::Whole(full, shown),
        }
    }

    /// A redacted argument: its name, and its value as JSON where it can be written (`None`: not
    /// `Serialize`, or its `Serialize` failed).
    pub(crate) fn redacted(&self) -> Option<(&'static str, Option<serde_json::Value>)> {
        match self.value {
            ArgValue::Redacted(value) => Some((self.name, value.and_then(|v| v.to_value().ok()))),
            _ => None,
        }
    }
}

impl ArgRef<'_> {
    /// An argument bound by a pattern, which generated code cannot name: the arguments cannot be
    /// written.
    pub const fn unnamed() -> ArgRef<'static> {
        ArgRef {
            name: "",
            value: ArgValue::Unnamed,
        }
    }
}

/// Serializes a value as JSON: `Serialize` made object-safe, so that every argument of one type, in any
/// tool, is written by the same code.
trait ToJson {
    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), serde_json::Error>;

    /// The value as a `serde_json::Value`, for a rule that reads one argument.
    fn to_value(&self) -> Result<serde_json::Value, serde_json::Error>;

    /// The value's type: bound with the value, so that two types that serialize alike (two unit
    /// structs, both `null`) are two calls to a generic tool.
    fn type_name(&self) -> &'static str;
}

impl<T: Serialize> ToJson for T {
    fn to_value(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::to_value(self)
    }

    fn type_name(&self) -> &'static str {
        std::any::type_name::<T>()
    }

    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        let start = out.len();
        serde_json::to_writer(&mut *out, self)?;
        // A map may serialize its keys in any order (a `HashMap` in its hasher's), and the same call
        // must always write the same JSON, or a two-step approval could never be used: objects are
        // written again with their keys sorted. Values with no object in them are written once.
        if out[start..].contains(&b'{') {
            let value = crate::canonical::parse_without_duplicates(&out[start..])?;
            out.truncate(start);
            crate::canonical::write(&value, out);
        }
        Ok(())
    }
}

/// Wraps a value so that generated code can ask whether it is serializable, without a bound on it.
#[doc(hidden)]
pub struct Arg<'a, T>(pub &'a T);

/// Picked for `(&&Arg(x))` when `x: Serialize`.
#[doc(hidden)]
pub trait SerializableArg<'a> {
    fn __toolgate_arg(&self, name: &'static str) -> ArgRef<'a>;
    /// An argument the tool's `redact` list names: recorded as `"[REDACTED]"`.
    fn __toolgate_redacted(&self, name: &'static str) -> ArgRef<'a>;
    /// The receiver of a method called by name on a registered instance: its value, which is
    /// serializable.
    // A `String`, not a `str`: it is sized, so a reference to it is a `&dyn ToJson`.
    #[allow(clippy::ptr_arg)]
    fn __toolgate_receiver(&self, label: &'a String) -> ArgRef<'a>;
}

impl<'a, T: Serialize> SerializableArg<'a> for &Arg<'a, T> {
    fn __toolgate_arg(&self, name: &'static str) -> ArgRef<'a> {
        ArgRef {
            name,
            value: ArgValue::Json(self.0),
        }
    }

    fn __toolgate_receiver(&self, _label: &'a String) -> ArgRef<'a> {
        self.__toolgate_arg("self")
    }

    fn __toolgate_redacted(&self, name: &'static str) -> ArgRef<'a> {
        ArgRef {
            name,
            value: ArgValue::Redacted(Some(self.0)),
        }
    }
}

/// Picked for `(&&Arg(x))` when `x` is not serializable.
#[doc(hidden)]
pub trait OpaqueArg<'a> {
    fn __toolgate_arg(&self, name: &'static str) -> ArgRef<'a>;
    /// An argument the tool's `redact` list names: recorded as `"[REDACTED]"`.
    fn __toolgate_redacted(&self, name: &'static str) -> ArgRef<'a>;
    /// The receiver of a method called by name on a registered instance: the registration's label,
    /// which no other instance has, since the value itself cannot be written.
    // A `String`, not a `str`: it is sized, so a reference to it is a `&dyn ToJson`.
    #[allow(clippy::ptr_arg)]
    fn __toolgate_receiver(&self, label: &'a String) -> ArgRef<'a>;
}

impl<'a, T> OpaqueArg<'a> for Arg<'a, T> {
    fn __toolgate_arg(&self, name: &'static str) -> ArgRef<'a> {
        ArgRef {
            name,
            value: ArgValue::Opaque,
        }
    }

    fn __toolgate_redacted(&self, name: &'static str) -> ArgRef<'a> {
        ArgRef {
            name,
            value: ArgValue::Redacted(None),
        }
    }

    fn __toolgate_receiver(&self, label: &'a String) -> ArgRef<'a> {
        ArgRef::json("self", label)
    }
}

/// Wraps a reference parameter so that generated code can ask whether it is a `&Gate` written another
/// way (a renamed import, a type alias), which then decides the call as a `&Gate` parameter does.
#[doc(hidden)]
pub struct GateProbe<'a, T: ?Sized>(pub &'a T);

/// Picked for `(&&GateProbe(x))` when `x: &Gate`.
#[doc(hidden)]
pub trait IsGate<'a> {
    fn __toolgate_gate(&self) -> Option<&'a crate::gate::Gate>;
}

impl<'a> IsGate<'a> for &GateProbe<'a, crate::gate::Gate> {
    #[inline]
    fn __toolgate_gate(&self) -> Option<&'a crate::gate::Gate> {
        Some(self.0)
    }
}

/// Picked for `(&&GateProbe(x))` otherwise.
#[doc(hidden)]
pub trait NotGate<'a> {
    fn __toolgate_gate(&self) -> Option<&'a crate::gate::Gate>;
}

impl<'a, T: ?Sized> NotGate<'a> for GateProbe<'a, T> {
    #[inline]
    fn __toolgate_gate(&self) -> Option<&'a crate::gate::Gate> {
        None
    }
}

/// Stands for a tool's result type, so that generated code can pick the function that digests its
/// `Ok` value (the output digest of an audited call) without a bound on it.
#[doc(hidden)]
pub struct OutputOf<T>(PhantomData<fn(&T)>);

impl<T> OutputOf<T> {
    /// The output type of `result`.
    pub const fn of<E>(_result: &Result<T, E>) -> OutputOf<T> {
        OutputOf(PhantomData)
    }
}

/// Picked for `(&&OutputOf::of(&result))` when the `Ok` type is `Serialize`.
#[doc(hidden)]
pub trait SerializableOutput<T> {
    fn __toolgate_digest(&self) -> fn(&T) -> Option<String>;
}

impl<T: Serialize> SerializableOutput<T> for &OutputOf<T> {
    fn __toolgate_digest(&self) -> fn(&T) -> Option<String> {
        json_digest::<T>
    }
}

/// Picked for `(&&OutputOf::of(&result))` otherwise: an opaque output has no digest.
#[doc(hidden)]
pub trait OpaqueOutput<T> {
    fn __toolgate_digest(&self) -> fn(&T) -> Option<String>;
}

impl<T> OpaqueOutput<T> for OutputOf<T> {
    fn __toolgate_digest(&self) -> fn(&T) -> Option<String> {
        |_| None
    }
}

fn json_digest<T: Serialize>(value: &T) -> Option<String> {
    let json = serde_json::to_vec(value).ok()?;
    Some(sha256_hex(&json))
}

// The double reference is what picks the serializable or the opaque path: it is the thing under test.
/// A tool's `escalate` function, called with a reference to each argument in order: `fn(&A, &B) -> Risk`,
/// where each parameter may also take what the argument borrows as (`&str` for a `String`). The
/// `Borrow` parameters `B..` are inferred from the function's own signature.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an `escalate` function for this tool",
    label = "not `fn(&arg1, &arg2, ..) -> toolgate::Risk` over this tool's arguments",
    note = "an `escalate` function takes a reference to each of the tool's arguments, in the \
            signature's order (not its `&Gate`), and returns `toolgate::Risk`; a parameter may take \
            what its argument borrows as, such as `&str` for a `String`"
)]
pub trait Classify<Args, Borrowed> {
    fn classify(&self, args: Args) -> Risk;
}

macro_rules! classify_impls {
    ($(($($a:ident $b:ident $x:ident),*))*) => {$(
        impl<F, $($a: Borrow<$b>, $b: ?Sized,)*> Classify<($(&$a,)*), ($(*const $b,)*)> for F
        where
            F: Fn($(&$b),*) -> Risk,
        {
            #[inline]
            fn classify(&self, ($($x,)*): ($(&$a,)*)) -> Risk {
                self($($x.borrow()),*)
            }
        }
    )*};
}

classify_impls! {
    ()
    (A1 B1 a1)
    (A1 B1 a1, A2 B2 a2)
    (A1 B1 a1, A2 B2 a2, A3 B3 a3)
    (A1 B1 a1, A2 B2 a2, A3 B3 a3, A4 B4 a4)
    (A1 B1 a1, A2 B2 a2, A3 B3 a3, A4 B4 a4, A5 B5 a5)
    (A1 B1 a1, A2 B2 a2, A3 B3 a3, A4 B4 a4, A5 B5 a5, A6 B6 a6)
    (A1 B1 a1, A2 B2 a2, A3 B3 a3, A4 B4 a4, A5 B5 a5, A6 B6 a6, A7 B7 a7)
    (A1 B1 a1, A2 B2 a2, A3 B3 a3, A4 B4 a4, A5 B5 a5, A6 B6 a6, A7 B7 a7, A8 B8 a8)
}

/// Calls a tool's `escalate` function on its arguments; see [`Classify`].
#[doc(hidden)]
#[inline]
pub fn classify<F, Args, Borrowed>(function: &F, args: Args) -> Risk
where
    F: Classify<Args, Borrowed>,
{
    function.classify(args)
}

/// Marks the form of a tool's `escalate`, `rollback` or `evidence` function that takes the arguments
/// alone.
#[doc(hidden)]
pub struct Free<B: ?Sized>(std::marker::PhantomData<*const B>);

/// Marks the form that takes the method's receiver first: `fn(&self, &arg1, ..)`, a method of the
/// tool's own type (the rmcp handler in place, the `#[toolset]`'s type), whose clients live in `self`.
#[doc(hidden)]
pub struct OnSelf<B: ?Sized>(std::marker::PhantomData<*const B>);

/// A method's `escalate` function: [`Classify`], or a method that takes the receiver first.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an `escalate` function for this tool",
    label = "not `fn(&arg1, ..) -> toolgate::Risk` nor `fn(&self, &arg1, ..) -> toolgate::Risk`",
    note = "an `escalate` function takes a reference to each of the tool's arguments (in place, to \
            the `T` of its `Parameters<T>`), in the signature's order, and returns \
            `toolgate::Risk`; a method of the tool's own type may take `&self` first"
)]
pub trait ClassifyOn<S: ?Sized, Args, Form> {
    fn classify_on(&self, this: &S, args: Args) -> Risk;
}

impl<S: ?Sized, F, Args, B> ClassifyOn<S, Args, Free<B>> for F
where
    F: Classify<Args, B>,
{
    #[inline]
    fn classify_on(&self, _: &S, args: Args) -> Risk {
        self.classify(args)
    }
}

macro_rules! on_self_impls {
    ($(($($a:ident $b:ident $x:ident),*))*) => {$(
        impl<S: ?Sized, F, $($a: Borrow<$b>, $b: ?Sized,)*>
            ClassifyOn<S, ($(&$a,)*), OnSelf<($(*const $b,)*)>> for F
        where
            F: Fn(&S, $(&$b),*) -> Risk,
        {
            #[inline]
            fn classify_on(&self, this: &S, ($($x,)*): ($(&$a,)*)) -> Risk {
                self(this, $($x.borrow()),*)
            }
        }

        impl<S: ?Sized, F, O, $($a: Borrow<$b>, $b: ?Sized,)*>
            PlanOn<S, ($(&$a,)*), OnSelf<($(*const $b,)*)>> for F
        where
            F: Fn(&S, $(&$b),*) -> O,
            O: PlanOutput,
        {
            #[inline]
            fn plan_on(&self, this: &S, ($($x,)*): ($(&$a,)*)) -> Result<Rollback, String> {
                self(this, $($x.borrow()),*).into_plan()
            }
        }
    )*};
}

on_self_impls! {
    ()
    (A1 B1 a1)
    (A1 B1 a1, A2 B2 a2)
    (A1 B1 a1, A2 B2 a2, A3 B3 a3)
    (A1 B1 a1, A2 B2 a2, A3 B3 a3, A4 B4 a4)
    (A1 B1 a1, A2 B2 a2, A3 B3 a3, A4 B4 a4, A5 B5 a5)
    (A1 B1 a1, A2 B2 a2, A3 B3 a3, A4 B4 a4, A5 B5 a5, A6 B6 a6)
    (A1 B1 a1, A2 B2 a2, A3 B3 a3, A4 B4 a4, A5 B5 a5, A6 B6 a6, A7 B7 a7)
    (A1 B1 a1, A2 B2 a2, A3 B3 a3, A4 B4 a4, A5 B5 a5, A6 B6 a6, A7 B7 a7, A8 B8 a8)
}

/// Calls a method's `escalate` function, free or taking `this` first; see [`ClassifyOn`].
#[doc(hidden)]
#[inline]
pub fn classify_on<S: ?Sized, F, Args, Form>(function: &F, this: &S, args: Args) -> Risk
where
    F: ClassifyOn<S, Args, Form>,
{
    function.classify_on(this, args)
}

/// A method's `rollback` function: [`MakePlan`], or a method that takes the receiver first.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a `rollback` function for this tool",
    label = "not `fn(&arg1, ..) -> Result<toolgate::Rollback, E>` nor the same taking `&self` first",
    note = "a `rollback` function takes a reference to each of the tool's arguments (in place, to \
            the `T` of its `Parameters<T>`), in the signature's order, and returns `Rollback`, \
            `Option<Rollback>` or `Result<Rollback, E: Display>`; a method of the tool's own type may \
            take `&self` first"
)]
pub trait PlanOn<S: ?Sized, Args, Form> {
    fn plan_on(&self, this: &S, args: Args) -> Result<Rollback, String>;
}

impl<S: ?Sized, F, Args, B> PlanOn<S, Args, Free<B>> for F
where
    F: MakePlan<Args, B>,
{
    #[inline]
    fn plan_on(&self, _: &S, args: Args) -> Result<Rollback, String> {
        self.make_plan(args)
    }
}

/// Calls a method's `rollback` function, free or taking `this` first; a panic is a plan that cannot be
/// made.
#[doc(hidden)]
pub fn plan_on<S: ?Sized, F, Args, Form>(
    function: &F,
    this: &S,
    args: Args,
) -> Result<Rollback, String>
where
    F: PlanOn<S, Args, Form>,
{
    checked_plan(std::panic::catch_unwind(std::panic::AssertUnwindSafe(
        || function.plan_on(this, args),
    )))
}

/// A method's `evidence` probe: [`Probe`], or a method that takes the receiver first.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an `evidence` probe of this tool's target",
    label = "not `fn(&target) -> Result<T, E>` nor `fn(&self, &target) -> Result<T, E>`",
    note = "an `evidence` probe takes a reference to the argument `target` names (in place, the field \
            of `T`), or what it borrows as, and returns `Result<T, E>` where `T: Serialize` and \
            `E: Display`; a method of the tool's own type may take `&self` first"
)]
pub trait ProbeOn<S: ?Sized, Arg, Form> {
    fn probe_on(&self, this: &S, arg: Arg) -> Result<serde_json::Value, String>;
}

impl<S: ?Sized, F, Arg, B> ProbeOn<S, Arg, Free<B>> for F
where
    F: Probe<Arg, B>,
{
    #[inline]
    fn probe_on(&self, _: &S, arg: Arg) -> Result<serde_json::Value, String> {
        self.probe(arg)
    }
}

impl<S: ?Sized, F, O, A: Borrow<B>, B: ?Sized> ProbeOn<S, &A, OnSelf<*const B>> for F
where
    F: Fn(&S, &B) -> O,
    O: ProbeOutput,
{
    #[inline]
    fn probe_on(&self, this: &S, arg: &A) -> Result<serde_json::Value, String> {
        self(this, arg.borrow()).into_evidence()
    }
}

/// Calls a method's `evidence` probe, free or taking `this` first; a panic is a probe that failed.
#[doc(hidden)]
pub fn probe_on<S: ?Sized, F, Arg, Form>(
    function: &F,
    this: &S,
    arg: Arg,
) -> Result<serde_json::Value, String>
where
    F: ProbeOn<S, Arg, Form>,
{
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        function.probe_on(this, arg)
    }))
    .unwrap_or_else(|_| Err("the probe panicked".to_owned()))
}

/// What a tool's `rollback` function may return: a plan, a plan or why there is none.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not what a `rollback` function returns",
    note = "a `rollback` function returns `toolgate::Rollback`, `Option<Rollback>` or \
            `Result<Rollback, E>` where `E: Display`"
)]
pub trait PlanOutput {
    fn into_plan(self) -> Result<Rollback, String>;
}

impl PlanOutput for Rollback {
    fn into_plan(self) -> Result<Rollback, String> {
        Ok(self)
    }
}

impl PlanOutput for Option<Rollback> {
    fn into_plan(self) -> Result<Rollback, String> {
        self.ok_or_else(|| "the tool's `rollback` function made no plan".to_owned())
    }
}

impl<E: std::fmt::Display> PlanOutput for Result<Rollback, E> {
    fn into_plan(self) -> Result<Rollback, String> {
        self.map_err(|e| e.to_string())
    }
}

/// A tool's `rollback` function, called with a reference to each argument in order, as an
/// `escalate` function is ([`Classify`]).
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a `rollback` function for this tool",
    label = "not `fn(&arg1, &arg2, ..) -> Result<toolgate::Rollback, E>` over this tool's arguments",
    note = "a `rollback` function takes a reference to each of the tool's arguments, in the \
            signature's order (not its `&Gate`), and returns `Rollback`, `Option<Rollback>` or \
            `Result<Rollback, E: Display>`; a parameter may take what its argument borrows as"
)]
pub trait MakePlan<Args, Borrowed> {
    fn make_plan(&self, args: Args) -> Result<Rollback, String>;
}

macro_rules! plan_impls {
    ($(($($a:ident $b:ident $x:ident),*))*) => {$(
        impl<F, O, $($a: Borrow<$b>, $b: ?Sized,)*> MakePlan<($(&$a,)*), ($(*const $b,)*)> for F
        where
            F: Fn($(&$b),*) -> O,
            O: PlanOutput,
        {
            #[inline]
            fn make_plan(&self, ($($x,)*): ($(&$a,)*)) -> Result<Rollback, String> {
                self($($x.borrow()),*).into_plan()
            }
        }
    )*};
}

plan_impls! {
    ()
    (A1 B1 a1)
    (A1 B1 a1, A2 B2 a2)
    (A1 B1 a1, A2 B2 a2, A3 B3 a3)
    (A1 B1 a1, A2 B2 a2, A3 B3 a3, A4 B4 a4)
    (A1 B1 a1, A2 B2 a2, A3 B3 a3, A4 B4 a4, A5 B5 a5)
    (A1 B1 a1, A2 B2 a2, A3 B3 a3, A4 B4 a4, A5 B5 a5, A6 B6 a6)
    (A1 B1 a1, A2 B2 a2, A3 B3 a3, A4 B4 a4, A5 B5 a5, A6 B6 a6, A7 B7 a7)
    (A1 B1 a1, A2 B2 a2, A3 B3 a3, A4 B4 a4, A5 B5 a5, A6 B6 a6, A7 B7 a7, A8 B8 a8)
}

/// Calls a tool's `rollback` function on its arguments; a panic is a plan that cannot be made.
#[doc(hidden)]
pub fn plan<F, Args, Borrowed>(function: &F, args: Args) -> Result<Rollback, String>
where
    F: MakePlan<Args, Borrowed>,
{
    checked_plan(std::panic::catch_unwind(std::panic::AssertUnwindSafe(
        || function.make_plan(args),
    )))
}

/// A plan made, or why there is none: its function panicked, or the plan cannot be carried out.
fn checked_plan(made: std::thread::Result<Result<Rollback, String>>) -> Result<Rollback, String> {
    let made =
        made.unwrap_or_else(|_| Err("the tool's `rollback` function panicked".to_owned()))?;
    match made.problem() {
        Some(problem) => Err(format!("the plan cannot be carried out: {problem}")),
        None => Ok(made),
    }
}

/// What a tool's `evidence` probe may return: the state it read, or why it could not.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not what an `evidence` probe returns",
    note = "an `evidence` probe returns `Result<T, E>` where `T: Serialize` and `E: Display`"
)]
pub trait ProbeOutput {
    fn into_evidence(self) -> Result<serde_json::Value, String>;
}

impl<T: Serialize, E: std::fmt::Display> ProbeOutput for Result<T, E> {
    fn into_evidence(self) -> Result<serde_json::Value, String> {
        let read = self.map_err(|e| e.to_string())?;
        serde_json::to_value(&read).map_err(|e| format!("what it read cannot be written: {e}"))
    }
}

/// A tool's `evidence` probe: called with a reference to the tool's target argument.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an `evidence` probe of this tool's target",
    label = "not `fn(&target) -> Result<T, E>` over this tool's target argument",
    note = "an `evidence` probe takes a reference to the argument `target` names (or what it \
            borrows as, such as `&str` for a `String`) and returns `Result<T, E>` where \
            `T: Serialize` and `E: Display`"
)]
pub trait Probe<Arg, Borrowed> {
    fn probe(&self, arg: Arg) -> Result<serde_json::Value, String>;
}

impl<F, O, A: Borrow<B>, B: ?Sized> Probe<&A, *const B> for F
where
    F: Fn(&B) -> O,
    O: ProbeOutput,
{
    #[inline]
    fn probe(&self, arg: &A) -> Result<serde_json::Value, String> {
        self(arg.borrow()).into_evidence()
    }
}

/// Calls a tool's `evidence` probe on its target; a panic is a probe that failed.
#[doc(hidden)]
pub fn probe<F, Arg, Borrowed>(function: &F, arg: Arg) -> Result<serde_json::Value, String>
where
    F: Probe<Arg, Borrowed>,
{
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| function.probe(arg)))
        .unwrap_or_else(|_| Err("the probe panicked".to_owned()))
}

/// Keeps a copy of a tool's target before its body takes it, for the probe after the body.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "the target `{Self}` of a tool with an `evidence` probe must be `Clone`",
    note = "the probe reads the target again after the body, which takes the argument: a copy is \
            kept before it runs"
)]
pub trait KeepTarget: Sized {
    fn keep(&self) -> Self;
}

impl<T: Clone> KeepTarget for T {
    #[inline]
    fn keep(&self) -> T {
        self.clone()
    }
}

/// A copy of a tool's target, kept for the probe after the body.
#[doc(hidden)]
#[inline]
pub fn keep_target<T: KeepTarget>(target: &T) -> T {
    target.keep()
}

#[cfg(test)]
#[allow(clippy::needless_borrow)]
mod tests {
    use super::*;

    struct Opaque;

    #[test]
    fn arguments_json_and_digest() {
        let (a, b) = (3u64, "x".to_owned());
        let args = [
            (&&Arg(&a)).__toolgate_arg("a"),
            (&&Arg(&b)).__toolgate_arg("b"),
        ];
        let call = CallInfo {
            arguments: &args,
            ..CallInfo::default()
        };
        let args = call.arguments().unwrap();
        assert_eq!(args.json, r#"{"a":3,"b":"x"}"#);
        assert_eq!(args.digest(), sha256_hex(br#"{"a":3,"b":"x"}"#));
        assert_eq!(args.digest().len(), 64);
        assert_eq!(CallInfo::default().arguments().unwrap().json, "{}");
    }

    #[test]
    fn opaque_unnamed_and_redacted_arguments() {
        let (a, b) = (Opaque, 1u8);
        // An opaque argument is shown as such, and the call cannot be bound.
        let args = [
            (&&Arg(&a)).__toolgate_arg("a"),
            (&&Arg(&b)).__toolgate_arg("b"),
        ];
        let call = CallInfo {
            arguments: &args,
            ..CallInfo::default()
        };
        let written = call.arguments().unwrap();
        assert_eq!(written.json, r#"{"a":"[NOT SERIALIZABLE]","b":1}"#);
        assert_eq!(call.binding(&written), None);
        // An argument bound by a pattern has no name: nothing can be written.
        let args = [(&&Arg(&b)).__toolgate_arg("b"), ArgRef::unnamed()];
        let call = CallInfo {
            arguments: &args,
            ..CallInfo::default()
        };
        assert!(call.arguments().is_none());
        let secret = "hunter2".to_owned();
        let args = [
            (&&Arg(&a)).__toolgate_redacted("a"),
            (&&Arg(&secret)).__toolgate_redacted("secret"),
        ];
        let call = CallInfo {
            arguments: &args,
            ..CallInfo::default()
        };
        let written = call.arguments().unwrap();
        assert_eq!(written.json, r#"{"a":"[REDACTED]","secret":"[REDACTED]"}"#);
        // An opaque redacted argument cannot be bound.
        assert_eq!(call.binding(&written), None);
    }

    #[test]
    fn an_approval_binding_covers_redacted_values_that_the_log_does_not_show() {
        let (user, one, other) = ("alice".to_owned(), "one".to_owned(), "other".to_owned());
        // The written arguments and their binding.
        let written = |password: &String| {
            let args = [
                (&&Arg(password)).__toolgate_redacted("password"),
                (&&Arg(&user)).__toolgate_arg("user"),
            ];
            let call = CallInfo {
                arguments: &args,
                ..CallInfo::default()
            };
            let written = call.arguments().unwrap();
            let binding = call.binding(&written);
            (written, binding)
        };
        let ((first, first_binding), (second, second_binding)) = (written(&one), written(&other));
        assert_eq!(first.json, r#"{"password":"[REDACTED]","user":"alice"}"#);
        assert_eq!(
            (&first.json, first.digest()),
            (&second.json, second.digest())
        );
        assert_ne!(first_binding, second_binding);
        // The real values, then each argument's type.
        let unredacted = "{\"password\":\"one\",\"user\":\"alice\"}\nalloc::string::String\nalloc::string::String";
        assert_eq!(first_binding, Some(sha256_hex(unredacted.as_bytes())));
        // Two values of two types that serialize alike bind apart.
        #[derive(Serialize)]
        struct DryRun;
        #[derive(Serialize)]
        struct Execute;
        let (dry, execute) = (DryRun, Execute);
        let bind = |arg: ArgRef<'_>| {
            let args = [arg];
            let call = CallInfo {
                arguments: &args,
                ..CallInfo::default()
            };
            let written = call.arguments().unwrap();
            let binding = call.binding(&written);
            (written, binding)
        };
        let ((dry, dry_binding), (execute, execute_binding)) = (
            bind((&&Arg(&dry)).__toolgate_arg("mode")),
            bind((&&Arg(&execute)).__toolgate_arg("mode")),
        );
        assert_eq!(dry.json, r#"{"mode":null}"#);
        assert_eq!((&dry.json, dry.digest()), (&execute.json, execute.digest()));
        assert_ne!(dry_binding, execute_binding);
    }

    #[test]
    fn an_object_with_a_repeated_key_cannot_be_written() {
        struct Repeated(u64);
        impl Serialize for Repeated {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeMap;
                let mut map = serializer.serialize_map(Some(2))?;
                map.serialize_entry("amount", &self.0)?;
                map.serialize_entry("amount", &1)?;
                map.end()
            }
        }
        let (small, large) = (Repeated(1), Repeated(1_000_000));
        for value in [&small, &large] {
            let args = [(&&Arg(value)).__toolgate_arg("order")];
            let call = CallInfo {
                arguments: &args,
                ..CallInfo::default()
            };
            assert_eq!(call.arguments(), None, "not serializable, so not bound");
        }
    }

    #[test]
    fn an_output_has_a_digest_when_it_is_serializable() {
        let ok: Result<u64, ()> = Ok(7);
        let digest = (&&OutputOf::of(&ok)).__toolgate_digest();
        assert_eq!(digest(&7), Some(sha256_hex(b"7")));
        let opaque: Result<Opaque, ()> = Ok(Opaque);
        let digest = (&&OutputOf::of(&opaque)).__toolgate_digest();
        assert_eq!(digest(&Opaque), None);
    }

    #[test]
    fn objects_are_written_with_sorted_keys() {
        use std::collections::HashMap;
        #[derive(Serialize)]
        struct Zebra {
            zebra: u8,
            apple: HashMap<&'static str, Vec<HashMap<&'static str, u8>>>,
        }
        let expected = r#"{"apple":{"x":[{"a":1,"b":2,"c":3,"d":4}],"y":[]},"zebra":1}"#;
        // Fresh maps each time, with fresh hashers: a map's own order is sorted by chance 1 time in 24.
        for _ in 0..20 {
            let inner = HashMap::from([("d", 4), ("b", 2), ("a", 1), ("c", 3)]);
            let value = Zebra {
                zebra: 1,
                apple: HashMap::from([("y", vec![]), ("x", vec![inner])]),
            };
            let mut out = Vec::new();
            value.write_json(&mut out).unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), expected);
        }
        // A value without an object is written once, as serde_json writes it.
        let mut out = Vec::new();
        vec!["{not an object}", "b"].write_json(&mut out).unwrap();
        assert_eq!(out, br#"["{not an object}","b"]"#);
    }

    #[test]
    fn escalation_never_lowers() {
        for declared in Risk::ALL {
            for escalated in Risk::ALL {
                let effective = EffectiveRisk::new(declared, Some(escalated)).get();
                assert!(effective >= declared && effective >= escalated);
                assert!(effective == declared || effective == escalated);
            }
            assert_eq!(EffectiveRisk::new(declared, None).get(), declared);
        }
    }
}

/// The operator's argument rules read each argument off the call: they agree with the arguments as
/// the log writes them.
#[cfg(test)]
#[allow(clippy::needless_borrow)]
mod rules_read_off_the_call {
    use super::*;
    use crate::gate::narrowing::{ArgumentRule, ArgumentTest, Narrowing, ToolRules};
    use proptest::prelude::*;
    use serde_json::{Number, Value};

    struct Opaque;

    /// Rules on every kind of argument; `strict` adds two that refuse every call (a redacted argument,
    /// an absent one) after the others.
    fn rules(strict: bool) -> Narrowing {
        let rule = |parameter: &str, test| ArgumentRule {
            parameter: parameter.into(),
            test,
            rule: "t.toml:1:1".into(),
        };
        Narrowing {
            tools: vec![ToolRules {
                arguments: vec![
                    rule(
                        "host",
                        ArgumentTest::Refuse(vec!["prod-*".into(), "*.internal".into()]),
                    ),
                    rule("hosts", ArgumentTest::Refuse(vec!["prod-*".into()])),
                    rule(
                        "n",
                        ArgumentTest::Range {
                            min: Some(Number::from(-5)),
                            max: Number::from_f64(100.0),
                        },
                    ),
                    rule(
                        "ratio",
                        ArgumentTest::Range {
                            min: None,
                            max: Number::from_f64(0.5),
                        },
                    ),
                    rule(
                        "unit",
                        ArgumentTest::OneOf(vec![Value::from("kg"), Value::from(3)]),
                    ),
                    rule("maybe", ArgumentTest::OneOf(vec![Value::from(1)])),
                    rule("secret", ArgumentTest::Refuse(vec!["*".into()])),
                    rule(
                        "absent",
                        ArgumentTest::Range {
                            min: Some(Number::from(0)),
                            max: None,
                        },
                    ),
                ]
                .into_iter()
                .take(if strict { 8 } else { 6 })
                .collect(),
                ..ToolRules::default()
            }],
            ..Narrowing::default()
        }
    }

    proptest! {
        // The gate reads each argument off the call; `explain` reads the arguments written as JSON.
        // Both must refuse the same calls, for the same reason.
        #[test]
        fn the_gate_and_the_written_arguments_agree(
            host in prop_oneof![Just("prod-db".to_owned()), Just("a.internal".to_owned()), "[a-z.-]{0,12}"],
            hosts in proptest::collection::vec(prop_oneof![Just("prod-x".to_owned()), "[a-z-]{0,8}"], 0..4),
            n in prop_oneof![Just(-5i64), Just(100), Just(101), Just(-6), -200i64..200],
            ratio in prop_oneof![Just(0.5f64), Just(0.5000001), -1.0f64..1.0],
            unit in prop_oneof![Just(Value::from("kg")), Just(Value::from(3)), Just(Value::from(3.0)), Just(Value::from("lb")), Just(Value::Null)],
            maybe in proptest::option::of(0u8..3),
            secret in "[a-z]{0,4}",
            opaque in any::<bool>(),
            order in any::<bool>(),
            strict in any::<bool>(),
        ) {
            let narrowing = rules(strict);
            let mut args = vec![
                (&&Arg(&host)).__toolgate_arg("host"),
                (&&Arg(&hosts)).__toolgate_arg("hosts"),
                (&&Arg(&n)).__toolgate_arg("n"),
                (&&Arg(&ratio)).__toolgate_arg("ratio"),
                (&&Arg(&unit)).__toolgate_arg("unit"),
                (&&Arg(&maybe)).__toolgate_arg("maybe"),
                (&&Arg(&secret)).__toolgate_redacted("secret"),
            ];
            if opaque {
                args.push((&&Arg(&Opaque)).__toolgate_arg("pool"));
            }
            if order {
                args.reverse();
            }
            let call = CallInfo { arguments: &args, ..CallInfo::default() };
            let json = call.arguments().map(|a| a.json);
            let by_gate = narrowing.refuses_arguments(0, |name| call.value(name));
            let by_json = narrowing.refuses_json(0, json.as_deref());
            prop_assert_eq!(&by_gate, &by_json);
            // A redacted argument is never read for what it is: the rule on it refuses it as unreadable.
            if let Some(why) = by_gate.as_deref().filter(|why| why.contains("`secret`")) {
                prop_assert!(why.ends_with("cannot be read (it is redacted or not serializable)"), "{}", why);
            }
            prop_assert!(!strict || by_gate.is_some());
        }
    }

    #[test]
    fn an_argument_bound_by_a_pattern_cannot_be_read() {
        let narrowing = rules(false);
        let host = "dev".to_owned();
        let args = [(&&Arg(&host)).__toolgate_arg("host"), ArgRef::unnamed()];
        let call = CallInfo {
            arguments: &args,
            ..CallInfo::default()
        };
        let why = narrowing
            .refuses_arguments(0, |name| call.value(name))
            .unwrap();
        assert!(why.contains("cannot be read to check `hosts`"), "{why}");
        let why = narrowing
            .refuses_json(0, call.arguments().map(|a| a.json).as_deref())
            .unwrap();
        assert!(why.contains("cannot be read to check `host`"), "{why}");
    }
}
