//! Processes: a second one on a run directory, Ctrl-C, the orchestrator, several machines.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{as_strs, check_error_shape, long_run, recipe, run, scratch, stderr, tiny};

/// Spawns a light_moco run of one epoch on the embedded subset (250 steps) in `run_dir` and
/// waits until its first steps are on disk.
fn spawn_long_run(run_dir: &Path) -> std::process::Child {
    let _ = std::fs::remove_dir_all(run_dir);
    let child = long_run(run_dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = child;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(120) {
        let rows = std::fs::read_to_string(run_dir.join("steps.csv"))
            .map(|t| t.lines().count().saturating_sub(1))
            .unwrap_or(0);
        if rows > 0 {
            return child;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("no step reached {}", run_dir.display());
}

/// A port nothing listens on, on the loopback address.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Two processes on one run directory: the second (a resume, an extension) is refused while the
/// first trains, naming its process id, before it writes anything (both used to run, the
/// second overwriting the first's checkpoints).
#[test]
fn a_second_process_on_a_run_directory_is_refused_naming_the_first() {
    let dir = scratch().join("two-writers");
    let mut first = spawn_long_run(&dir);
    let config = std::fs::read(dir.join("config.json")).unwrap();
    let o = run(&["resume", dir.to_str().unwrap(), "--extend", "--epochs", "9"]);
    let _ = first.kill();
    let _ = first.wait();
    let err = stderr(&o);
    assert_eq!(check_error_shape(&o, "second"), 2, "{err}");
    assert!(
        err.contains(&format!("is in use by process {}", first.id())),
        "{err}"
    );
    assert_eq!(std::fs::read(dir.join("config.json")).unwrap(), config);
}

/// Ctrl-C stops a run after its step with the resume command and exit code 130 (it printed
/// nothing); the resume finishes the run.
#[cfg(unix)]
#[test]
fn ctrl_c_stops_a_run_with_the_command_that_resumes_it() {
    let dir = scratch().join("interrupted");
    let child = spawn_long_run(&dir);
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(check_error_shape(&o, "interrupted"), 130, "{err}");
    assert!(
        err.contains("stopping after this step")
            && err.contains("error: interrupted at step")
            && err.contains(&format!("resume with `recipe resume {}`", dir.display())),
        "{err}"
    );
}

/// The signal a run receives when the study that started it ends (SIGUSR1, through
/// PR_SET_PDEATHSIG) stops it after its step however often it comes: Linux sends it once per
/// thread of the parent that ends first, and as SIGTERM the second stopped the run at once (a
/// study killed with SIGKILL lost its run's epoch, now and then).
#[cfg(unix)]
#[test]
fn the_parent_ended_signal_stops_a_run_after_its_step_however_often_it_comes() {
    let dir = scratch().join("parent-ended");
    let child = spawn_long_run(&dir);
    for i in 0..3 {
        let sent = Command::new("kill")
            .args(["-USR1", &child.id().to_string()])
            .status()
            .unwrap();
        // The first reaches the run; a later one may find it already ended after its step
        // (which is what is asked of it).
        assert!(sent.success() || i > 0);
        // Apart, so that the run's signal thread reads each (signals of one kind that arrive
        // before it reads them merge into one); it reads them at once, a step takes longer.
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert_eq!(check_error_shape(&o, "parent-ended"), 130, "{err}");
    assert!(
        err.contains("the process that started this one ended: stopping after this step")
            && err.contains("error: interrupted at step")
            && !err.contains("stopped at once"),
        "{err}"
    );
}

/// `recipe orchestrator` binds the address it is given (port 0: a free one, printed) and says
/// when it cannot (it printed "listening", then an error, and exited 0).
#[test]
fn the_orchestrator_binds_the_address_given_and_refuses_a_taken_port() {
    let mut child = recipe(&["orchestrator", "--port", "0", "--address", "127.0.0.1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    {
        use std::io::BufRead;
        let mut out = std::io::BufReader::new(child.stdout.as_mut().unwrap());
        out.read_line(&mut line).unwrap();
    }
    let port: u16 = line
        .split("ws://127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no loopback address and port in {line:?}"));
    assert_ne!(port, 0);
    // It holds 127.0.0.1:PORT only: the same port on another loopback address is free (bound
    // to every interface, as before, it was taken there too).
    std::net::TcpListener::bind(("127.0.0.2", port)).unwrap_or_else(|e| {
        panic!("127.0.0.2:{port} is taken ({e}): not bound to 127.0.0.1 alone")
    });
    // The same port again: taken.
    let o = run(&[
        "orchestrator",
        "--port",
        &port.to_string(),
        "--address",
        "127.0.0.1",
    ]);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(check_error_shape(&o, "taken"), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "--address 127.0.0.1 --port {port}: cannot listen there"
        )),
        "{}",
        stderr(&o)
    );
    assert!(!String::from_utf8_lossy(&o.stdout).contains("listening"));
}

/// A run on two machines whose second was started with another --seed: both are refused,
/// naming the setting and both values, before anything is trained (the writer used to report
/// success for replicas that trained different runs). And a machine whose orchestrator is
/// absent stops after --timeout.
#[test]
fn machines_started_with_other_settings_are_refused_and_an_absent_orchestrator_ends_the_wait() {
    let mut orchestrator = recipe(&["orchestrator", "--port", "0", "--address", "127.0.0.1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    {
        use std::io::BufRead;
        let mut out = std::io::BufReader::new(orchestrator.stdout.as_mut().unwrap());
        out.read_line(&mut line).unwrap();
    }
    let address = line
        .split_whitespace()
        .find(|w| w.starts_with("ws://"))
        .unwrap()
        .to_string();
    let node = |rank: &str, seed: &str| {
        let dir = scratch().join(format!("seeds-{rank}"));
        let _ = std::fs::remove_dir_all(&dir);
        let mut args = tiny(dir.to_str().unwrap(), &["--seed", seed, "--timeout", "60"]);
        args.extend([
            "--nodes".to_string(),
            "2".into(),
            "--node-rank".into(),
            rank.into(),
            "--orchestrator".into(),
            address.clone(),
            "--node-address".into(),
            format!("ws://127.0.0.1:{}", free_port()),
        ]);
        recipe(&as_strs(&args))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let machines = [node("0", "0"), node("1", "1")];
    let outputs: Vec<Output> = machines
        .into_iter()
        .map(|m| m.wait_with_output().unwrap())
        .collect();
    let _ = orchestrator.kill();
    let _ = orchestrator.wait();
    for o in &outputs {
        let err = stderr(o);
        assert_eq!(check_error_shape(o, "seeds"), 2, "{err}");
        assert!(
            err.contains("replica 1 was started with other settings than replica 0")
                && err.contains("train.seed: replica 0 0, replica 1 1"),
            "{err}"
        );
    }
    assert!(!scratch().join("seeds-0/checkpoints").exists());
    // No orchestrator at all: the machine tries for --timeout seconds, then says so.
    let started = Instant::now();
    let mut args = tiny("no-orchestrator", &["--timeout", "2"]);
    args.extend([
        "--nodes".to_string(),
        "2".into(),
        "--node-rank".into(),
        "0".into(),
        "--orchestrator".into(),
        format!("ws://127.0.0.1:{}", free_port()),
        "--node-address".into(),
        format!("ws://127.0.0.1:{}", free_port()),
    ]);
    let o = run(&as_strs(&args));
    let err = stderr(&o);
    assert_eq!(check_error_shape(&o, "no orchestrator"), 1, "{err}");
    assert!(err.contains("could not be reached within 2 s"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(60));
}
