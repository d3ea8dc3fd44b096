//! `shortfirst serve`: not built yet; its issue replaces this module.

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`shortfirst serve` is not built yet")
}
