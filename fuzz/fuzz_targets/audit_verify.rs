//! Arbitrary bytes as an audit log: the verifier never panics or hangs, reading from memory and from a
//! reader agree, and the report is consistent with the bytes (see `report_checks`).

#![no_main]

mod report_checks;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    report_checks::checked_report(data);
});
