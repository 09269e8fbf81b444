//! A gate's table: every tool's verdict in every mode, worked out from the tools' manifests, the gate's
//! deny rules, budgets and approvers, and the operator's policy; rebuilt whole when that policy changes.

use std::sync::Arc;

use crate::gate::budget::{BudgetStore, Budgets, HistoryOwners};
use crate::gate::denylist::DenyRule;
use crate::gate::narrowing::Narrowing;
use crate::registry::registry;
use toolgate_policy::{self as policy, DenialCode, Facts, Mode, TaintPolicy, Verdict};

/// What the gate's policy says of each tool, worked out when it was built.
pub(crate) struct Table {
    /// Per registry slot, the verdict in each mode (indexed by `Mode as usize`).
    /// Then, at `TAINTED | mode`, the verdict once the session is tainted ([`policy::decide_tainted`]):
    /// the mode's atomic, with its taint bit, indexes the row.
    pub(crate) verdicts: Box<[[Verdict; 8]]>,
    /// Per registry slot, the index of the first deny rule matching the tool.
    pub(crate) deny_rule_of: Box<[Option<u32>]>,
    pub(crate) deny_rules: Box<[Arc<str>]>,
    /// What the operator's policy takes away (its deny rules and asks are in `verdicts` already; its
    /// argument rules are read per call).
    pub(crate) narrowing: Narrowing,
    /// The code's taint policy, as the operator's policy narrows it.
    pub(crate) taint_policy: TaintPolicy,
    /// The operator's budgets, counted in the same store as the code's.
    pub(crate) budgets: Option<Budgets>,
    /// Counts the tables a gate had: a decision made with one is read again at the commit point when
    /// another replaced it.
    pub(crate) generation: u64,
    /// Per registry slot, whether a call takes the full decision whatever its verdict: a budget counts
    /// it, an argument rule reads it, or a record is written. A session grant never lets such a call
    /// run from the inlined check.
    pub(crate) full: Box<[bool]>,
    /// Per registry slot, whether the operator's argument rules are all that takes a call to the full
    /// decision: no record, no budget, no latch to close. A lone gate then reads the rules and lets the
    /// call run from its check (`decide::table::ruled`).
    pub(crate) ruled_only: Box<[bool]>,
}

/// What a gate's table is worked out from, besides the operator's policy.
pub(crate) struct TableInputs {
    pub(crate) rules: Vec<DenyRule>,
    pub(crate) can_approve: bool,
    pub(crate) keeps_records: bool,
    /// Per registry slot, whether a budget of the code counts the tool's calls.
    pub(crate) counted: Vec<bool>,
    pub(crate) taint_policy: TaintPolicy,
    /// Where the operator's budgets count, beside the code's: one store for the gate's life, so that
    /// a budget that a new policy keeps keeps its count.
    pub(crate) budget_store: Arc<dyn BudgetStore>,
    pub(crate) agent: Option<Arc<str>>,
    /// Whose history the operator's rules over history read: the gate's principal, and its session.
    pub(crate) principal: Option<Arc<str>>,
    pub(crate) session: Arc<str>,
}

impl TableInputs {
    /// The table and the outright bits for `narrowing`.
    pub(crate) fn table(&self, mut narrowing: Narrowing, generation: u64) -> (Table, Vec<u8>) {
        let registry = registry();
        let taint_policy = narrowing.taint_policy(self.taint_policy);
        let specs = std::mem::take(&mut narrowing.budgets);
        let history = std::mem::take(&mut narrowing.history);
        let owners = HistoryOwners {
            principal: self.principal.as_deref(),
            session: &self.session,
        };
        let budgets = match Budgets::build_with_history(
            specs,
            history,
            Some(self.budget_store.clone()),
            self.agent.as_deref(),
            owners,
        ) {
            Ok(budgets) => budgets,
            // A checked file's budgets build; were one not to, its tools are refused, not uncounted.
            Err(_) => {
                narrowing.deny_all("the operator's budgets could not be built");
                None
            }
        };
        let deny_rule_of: Box<[Option<u32>]> = registry
            .entries
            .iter()
            .map(|e| {
                let position = self.rules.iter().position(|r| r.matches_entry(e))?;
                u32::try_from(position).ok()
            })
            .collect();
        let mut allowed_outright = Vec::with_capacity(registry.entries.len());
        let mut verdicts = Vec::with_capacity(registry.entries.len());
        let mut fulls = Vec::with_capacity(registry.entries.len());
        let mut ruled_only = Vec::with_capacity(registry.entries.len());
        for (slot, (entry, rule)) in registry.entries.iter().zip(&deny_rule_of).enumerate() {
            let manifest = &entry.manifest;
            let policy_deny = narrowing.tool(slot).is_some_and(|t| t.deny.is_some());
            let facts = |mode| Facts {
                risk: manifest.risk_level,
                allowed_modes: manifest.allowed_modes,
                mode,
                deny_listed: rule.is_some() || policy_deny,
                can_approve: self.can_approve,
            };
            let narrow =
                |verdict| narrowing.narrow(slot, manifest.risk_level, verdict, self.can_approve);
            let clean = Mode::ALL.map(|mode| narrow(policy::decide(facts(mode))));
            let tainted =
                Mode::ALL.map(|mode| narrow(policy::decide_tainted(facts(mode), taint_policy)));
            // A call a budget counts, or an argument rule reads, takes the full decision.
            let counted = self.keeps_records
                || self.counted[slot]
                || budgets
                    .as_ref()
                    .is_some_and(|b| b.covers(slot, manifest.risk_level));
            let ruled = narrowing.has_argument_rules(slot);
            // A tool with lasting effects has its target checked, its plan made and its evidence read.
            let full = counted || ruled || manifest.has_effects();
            fulls.push(full);
            ruled_only
                .push(ruled && !counted && !manifest.has_effects() && !manifest.untrusted_output);
            allowed_outright.push(
                outright_bits(&clean, full || manifest.untrusted_output)
                    | outright_bits(&tainted, full) << TAINTED,
            );
            let mut row = [Verdict::Allow; 8];
            row[..4].copy_from_slice(&clean);
            row[4..].copy_from_slice(&tainted);
            verdicts.push(row);
        }
        let table = Table {
            verdicts: verdicts.into(),
            deny_rule_of,
            deny_rules: self.rules.iter().map(|r| Arc::from(r.as_str())).collect(),
            narrowing,
            taint_policy,
            budgets,
            generation,
            full: fulls.into(),
            ruled_only: ruled_only.into(),
        };
        (table, allowed_outright)
    }
}

/// The bit of [`Inner::mode`] set once the session is tainted; as a shift, where the tainted session's
/// bits of [`Inner::allowed_outright`] start.
pub(crate) const TAINTED: u8 = 4;

/// A verdict as one byte: 0 allows, 1 needs an approval, 2 + i refuses with `DenialCode::ALL[i]`.
pub(crate) fn verdict_cell(verdict: Verdict) -> u8 {
    match verdict {
        Verdict::Allow => 0,
        Verdict::NeedsApproval => 1,
        Verdict::Refuse(code) => {
            let i = DenialCode::ALL.iter().position(|c| *c == code).unwrap_or(0);
            2 + i as u8
        }
    }
}

/// [`verdict_cell`] read back; a byte it never writes refuses.
#[inline]
pub(crate) fn cell_verdict(cell: u8) -> Verdict {
    match cell {
        0 => Verdict::Allow,
        1 => Verdict::NeedsApproval,
        n => Verdict::Refuse(
            DenialCode::ALL
                .get(usize::from(n - 2))
                .copied()
                .unwrap_or(DenialCode::UnregisteredTool),
        ),
    }
}

/// Bit `mode` set where `row` allows the call outright: allowed, and nothing to do beside running it.
pub(crate) fn outright_bits(row: &[Verdict; 4], keeps_records: bool) -> u8 {
    let outright = |mode: usize| row[mode] == Verdict::Allow && !keeps_records;
    (0..4).fold(0u8, |bits, mode| bits | u8::from(outright(mode)) << mode)
}
