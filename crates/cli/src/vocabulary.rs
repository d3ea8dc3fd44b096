//! `shortfirst vocabulary`: the names this build takes for every choice a tool reads it for
//! (the lab checks experiment files against it), as one JSON object: `serve`'s policies,
//! schedulers and their pairings, `sim`'s policies and dispatch rules, the gatekeeper's
//! admission policies and cost bases. Each list comes from the one definition the parser
//! uses; a form with an argument spells it in capitals (`sjf-aging:X`, `sita:CUTOFFS`).

use anyhow::Result;
use serde::Serialize;
use shortfirst_core::admission::{AdmissionPolicy, Basis};
use shortfirst_core::dispatch::DispatchRule;
use shortfirst_core::policy::Policy;
use strum::VariantNames;

#[derive(clap::Args, Debug)]
pub struct Args {}

#[derive(Serialize)]
struct Vocabulary {
    version: &'static str,
    serve: shortfirst_server::config::Vocabulary,
    sim: Sim,
    gatekeeper: Gatekeeper,
}

#[derive(Serialize)]
struct Sim {
    policy: &'static [&'static str],
    dispatch: &'static [&'static str],
}

#[derive(Serialize)]
struct Gatekeeper {
    policy: &'static [&'static str],
    estimate_basis: &'static [&'static str],
}

fn vocabulary() -> Vocabulary {
    Vocabulary {
        version: env!("CARGO_PKG_VERSION"),
        serve: shortfirst_server::config::vocabulary(),
        sim: Sim { policy: &Policy::FORMS, dispatch: &DispatchRule::FORMS },
        gatekeeper: Gatekeeper { policy: &AdmissionPolicy::FORMS, estimate_basis: Basis::VARIANTS },
    }
}

pub fn run(_args: Args) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(&vocabulary())?);
    Ok(())
}
