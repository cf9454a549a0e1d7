//! `latscope completions SHELL` and `latscope man`: shell completions and the man page, both
//! generated from the one clap definition in `crate::cli`, handed down as a `clap::Command` (so
//! they never drift from `--help`).
//! `scripts/install.sh` writes them where bash, zsh, fish and man look.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;

use clap::Args;
use clap_complete::Shell;

use crate::exit;

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  latscope completions bash > /usr/share/bash-completion/completions/latscope\n  latscope completions zsh > /usr/local/share/zsh/site-functions/_latscope\n  latscope completions fish > ~/.config/fish/completions/latscope.fish"
)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  latscope man | man -l -\n  latscope man --out-dir /usr/local/share/man/man1   # latscope.1 and latscope-SUBCOMMAND.1"
)]
pub struct ManArgs {
    /// Write latscope.1 and one latscope-SUBCOMMAND.1 page per subcommand into DIR instead of
    /// printing the top-level page.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

/// Print the completion script of `cmd` (the whole command line) for `a.shell`.
pub fn completions(a: &CompletionsArgs, mut cmd: clap::Command) -> anyhow::Result<u8> {
    let mut out = std::io::stdout().lock();
    clap_complete::generate(a.shell, &mut cmd, "latscope", &mut out);
    out.flush()?;
    Ok(exit::OK)
}

/// Print the top-level man page (roff) of `cmd` (the whole command line), or write every page
/// into `--out-dir`.
pub fn man(a: &ManArgs, cmd: clap::Command) -> anyhow::Result<u8> {
    match &a.out_dir {
        Some(dir) => {
            if !dir.is_dir() {
                return Err(exit::coded(
                    exit::USAGE,
                    format!(
                        "--out-dir {}: not a directory (create it first)",
                        dir.display()
                    ),
                ));
            }
            clap_mangen::generate_to(cmd, dir)
                .with_context(|| format!("writing man pages into {}", dir.display()))?;
        }
        None => {
            let mut out = std::io::stdout().lock();
            clap_mangen::Man::new(cmd).render(&mut out)?;
            out.flush()?;
        }
    }
    Ok(exit::OK)
}
