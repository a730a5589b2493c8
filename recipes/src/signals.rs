//! Ctrl-C (SIGINT) and SIGTERM during a run: the first asks the run to stop after its step (on
//! several replicas, at the end of the epoch), which ends with the resume command and exit code
//! 130; a second stops the process at once (the checkpoints on disk are written atomically, so
//! at most the epoch under way is lost). A run a study started also stops after its step when the
//! study ends however it ends (`kill -9` included): the kernel sends it [`PARENT_ENDED`], which
//! never stops it at once, as often as it comes.
//!
//! Why a thread: a signal handler may do next to nothing safely; signal-hook's iterator records
//! the signal in the handler and hands it to an ordinary thread, which sets the run's flag and
//! prints. (The `ctrlc` crate does the same for SIGINT only.)

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

/// The exit code of a run stopped by a signal (128 + SIGINT, as shells report Ctrl-C).
pub const INTERRUPTED: u8 = 130;

/// The signal a child started through [`ends_with_this_process`] receives when this process
/// ends: SIGUSR1, not SIGTERM, because Linux sends it once per thread of the parent that ends
/// while the child is still its child (the child is handed to the parent's next live thread, then
/// to init), so a multi-threaded study killed with SIGKILL could deliver it twice, and a second
/// SIGTERM stops a run at once, losing its epoch. Any number of these only ask for the stop
/// after the step.
pub const PARENT_ENDED: libc::c_int = libc::SIGUSR1;

/// A stop by Ctrl-C or SIGTERM outside a run's own trainer (a study between or during its
/// runs): exit code [`INTERRUPTED`], with what continues it.
#[derive(Debug)]
pub struct Interrupted(pub String);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Interrupted {}

/// The flag a run stops on ([`curriculum_ssl::train::TrainerBuilder::stop_when`]), set by the
/// first SIGINT or SIGTERM the process receives; the signals are listened for from the first
/// call on.
pub fn stop_flag() -> Arc<AtomicBool> {
    static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    FLAG.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        listen(flag.clone());
        flag
    })
    .clone()
}

/// The process id of the child this process waits for ([`status_passing_signals`]), to which
/// each SIGINT or SIGTERM it receives is passed on as SIGTERM; 0 when there is none.
static CHILD: AtomicU32 = AtomicU32::new(0);

/// Runs `command` and waits for it, passing on each SIGINT or SIGTERM this process receives
/// to it as SIGTERM (so a study stopped by `kill` or by its service manager stops its run after
/// the run's step, with a checkpoint, instead of leaving the run going on its own). The child
/// gets a process group of its own, so a terminal's Ctrl-C reaches it once, through this
/// process, not twice (a second signal stops a run at once).
pub fn status_passing_signals(command: &mut Command) -> std::io::Result<ExitStatus> {
    wait_passing_signals(command, |mut child| child.wait())
}

/// [`status_passing_signals`], capturing the child's output.
pub fn output_passing_signals(command: &mut Command) -> std::io::Result<Output> {
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    wait_passing_signals(command, Child::wait_with_output)
}

fn wait_passing_signals<R>(
    command: &mut Command,
    wait: impl FnOnce(Child) -> std::io::Result<R>,
) -> std::io::Result<R> {
    let stop = stop_flag();
    let child = ends_with_this_process(command.process_group(0)).spawn()?;
    CHILD.store(child.id(), Ordering::SeqCst);
    // A signal that came before the child was known (between two runs of a study, or while
    // this one started) is passed on now: the child stops after its first step.
    if stop.load(Ordering::SeqCst) {
        pass_on();
    }
    let result = wait(child);
    CHILD.store(0, Ordering::SeqCst);
    result
}

/// Makes the child that `command` starts receive [`PARENT_ENDED`] when this process ends,
/// however it ends (`kill -9` included), so that it stops after its step as on a first SIGTERM
/// instead of training on as an orphan that holds its run directory (Linux: `PR_SET_PDEATHSIG`,
/// set in the child between `fork` and `exec`). A parent that died before the setting took
/// effect is seen by the child (its parent is no longer this process), which then does not
/// start. The signal first comes when the thread that started the child ends: start children
/// from a thread that lives as long as the process waits for them (a study starts its runs from
/// its main thread). Elsewhere than on Linux, nothing changes.
pub fn ends_with_this_process(command: &mut Command) -> &mut Command {
    #[cfg(target_os = "linux")]
    {
        let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
        // prctl(2) reads its arguments as unsigned longs.
        let signal = PARENT_ENDED as libc::c_ulong;
        let zero: libc::c_ulong = 0;
        // SAFETY: the closure runs in the child between fork and exec, where only
        // async-signal-safe calls are allowed: prctl(2) and getppid(2) are system calls, and
        // the errors are built from OS error numbers without allocating.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, signal, zero, zero, zero) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died between fork and prctl: then the signal never comes.
                if libc::getppid() != parent {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
    }
    command
}

/// Sends SIGTERM to the child being waited for, if any.
fn pass_on() {
    let child = CHILD.load(Ordering::SeqCst);
    if let Ok(pid) = libc::pid_t::try_from(child) {
        if pid > 0 {
            // SAFETY: kill(2) takes two integers and touches no memory of this process.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
    }
}

fn listen(flag: Arc<AtomicBool>) {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = match signal_hook::iterator::Signals::new([SIGINT, SIGTERM, PARENT_ENDED]) {
        Ok(signals) => signals,
        Err(e) => {
            log::warn!("Ctrl-C will stop the process at once: its signal cannot be caught ({e})");
            return;
        }
    };
    let spawned = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                if signal == PARENT_ENDED {
                    // As often as it comes: the first asks for the stop, the others nothing.
                    if !flag.swap(true, Ordering::SeqCst) {
                        pass_on();
                        eprintln!(
                            "\nthe process that started this one ended: stopping after this step \
                             (on several replicas: at the end of this epoch, with a checkpoint); \
                             a resume continues from the last checkpoint"
                        );
                    }
                    continue;
                }
                pass_on();
                if flag.swap(true, Ordering::SeqCst) {
                    eprintln!("\nstopped at once (the checkpoints on disk are complete)");
                    std::process::exit(i32::from(INTERRUPTED));
                }
                eprintln!(
                    "\nstopping after this step (on several replicas: at the end of this epoch, \
                     with a checkpoint); a resume continues from the last checkpoint; press \
                     Ctrl-C again to stop at once"
                );
            }
        });
    if let Err(e) = spawned {
        log::warn!("Ctrl-C will stop the process at once: no thread to catch it ({e})");
    }
}
