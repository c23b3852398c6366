//! Walking a binary's `--help`: every subcommand's text, and the lines
//! where clap's annotations (`[env: ...]`, `[default: ...]`) appear twice
//! (a doc comment that states what clap appends anyway).

use std::path::Path;
use std::process::Command;

/// `bin [path..] --help` for the binary and each of its subcommands, depth
/// first: (the subcommand path, its help text).
pub fn all_help(bin: &Path) -> Vec<(Vec<String>, String)> {
    let mut out = Vec::new();
    walk(bin, &mut Vec::new(), &mut out);
    out
}

fn walk(bin: &Path, path: &mut Vec<String>, out: &mut Vec<(Vec<String>, String)>) {
    let run = Command::new(bin)
        .args(path.iter())
        .arg("--help")
        .output()
        .expect("run --help");
    assert!(
        run.status.success(),
        "{} {path:?} --help failed",
        bin.display()
    );
    let text = String::from_utf8_lossy(&run.stdout).into_owned();
    let subs = subcommands(&text);
    out.push((path.clone(), text));
    for s in subs {
        path.push(s);
        walk(bin, path, out);
        path.pop();
    }
}

/// The names listed under `Commands:` (but `help`).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// Every help line, of the binary and each subcommand, that holds an
/// `[env: ...]` or a `[default: ...]` twice, as `subcommand: line`.
pub fn repeated_annotations(bin: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for (path, text) in all_help(bin) {
        for line in text.lines() {
            if ["[env: ", "[default: "]
                .iter()
                .any(|tag| line.matches(tag).count() > 1)
            {
                found.push(format!("{}: {}", path.join(" "), line.trim()));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subcommands_are_read_from_the_commands_section() {
        let help = "Usage: x\n\nCommands:\n  run     Run\n  config  Configure\n  help    Print\n\nOptions:\n  -h\n";
        assert_eq!(subcommands(help), ["run", "config"]);
        assert!(subcommands("Usage: x\n\nOptions:\n  -h\n").is_empty());
    }
}
