// A method of the tool's own type may be its `escalate` function, taking `&self` first; one that
// takes what the tool's arguments are not is refused, saying what it must take.
use toolgate::{Denied, Risk};

pub struct Desk;

impl Desk {
    fn classify(&self, _: &u8) -> Risk {
        Risk::HighWrite
    }
}

#[toolgate::toolset(domain = "desk")]
impl Desk {
    /// Run a command.
    #[tool(risk = "LOW_WRITE", escalate = Self::classify)]
    pub fn run(&self, line: String) -> Result<String, Denied> {
        Ok(line)
    }
}

fn main() {}
