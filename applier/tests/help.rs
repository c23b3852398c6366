//! Each subcommand's `--help` lists the options it uses and no other, and
//! no help line says an `[env: ...]` or `[default: ...]` twice.

use std::path::Path;
use std::process::Command;

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_applier"))
        .args(args)
        .arg("--help")
        .output()
        .expect("run applier");
    assert!(out.status.success(), "{args:?} --help");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// (subcommand, options its help must list, options it must not).
const OPTIONS: &[(&str, &[&str], &[&str])] = &[
    (
        "run",
        &[
            "--log-dir <",
            "--bucket <",
            "--topics <",
            "--download-concurrency <",
            "--store-timeout <",
            "--kafka-listen <",
            "--tiered-topic <",
        ],
        &["--topic <", "--all "],
    ),
    (
        "once",
        &[
            "--log-dir <",
            "--bucket <",
            "--topics <",
            "--download-concurrency <",
            "--preflight <",
            "--allow-truncate",
        ],
        &["--kafka-listen <", "--topic <"],
    ),
    (
        "plan",
        &[
            "--log-dir <",
            "--bucket <",
            "--source-cluster-id <",
            "--topics <",
            "--store-timeout <",
            "--tiered-topic <",
        ],
        &[
            "--download-concurrency <",
            "--metrics-addr <",
            "--poll-interval <",
        ],
    ),
    (
        "start",
        &[
            "--log-dir <",
            "--bucket <",
            "--source-cluster-id <",
            "--cluster-id <",
            "--topic <",
            "--all ",
            "--allow-truncate",
            "--timeout <",
        ],
        &[
            "--download-concurrency <",
            "--metrics-addr <",
            "--topics <",
            "--poll-interval <",
            "--scrub-bytes-per-hour <",
        ],
    ),
    (
        "stop",
        &[
            "--log-dir <",
            "--config <",
            "--topic <",
            "--all ",
            "--timeout <",
        ],
        &[
            "--download-concurrency <",
            "--bucket <",
            "--source-cluster-id <",
            "--topics <",
            "--metrics-addr <",
            "--store-timeout <",
        ],
    ),
    (
        "pause",
        &["--log-dir <", "--topic <"],
        &[
            "--download-concurrency <",
            "--bucket <",
            "--poll-interval <",
        ],
    ),
    (
        "resume",
        &["--log-dir <", "--topic <"],
        &["--download-concurrency <", "--bucket <", "--disk-reserve <"],
    ),
];

#[test]
fn each_command_lists_only_the_options_it_uses() {
    for (sub, has, lacks) in OPTIONS {
        let text = help(&[sub]);
        for o in *has {
            assert!(text.contains(o), "applier {sub} --help lacks {o}:\n{text}");
        }
        for o in *lacks {
            assert!(
                !text.contains(o),
                "applier {sub} --help lists {o}, which it does not use:\n{text}"
            );
        }
    }
}

#[test]
fn no_help_line_repeats_an_env_or_a_default() {
    let repeated =
        segmirror_testkit::help::repeated_annotations(Path::new(env!("CARGO_BIN_EXE_applier")));
    assert!(repeated.is_empty(), "{repeated:#?}");
}
