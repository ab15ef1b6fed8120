//! Network namespaces, veth pairs, processes started inside them and raw
//! `AF_PACKET` peers: the one set of building blocks behind `portico demo`'s
//! topology (the `portico` library re-exports this crate as
//! `portico::netns`), the end-to-end suites (`portico-tests` re-exports it),
//! the benchmarks' namespace tests, and the drivers' namespace tests in the
//! dataplane.
//!
//! This crate depends on no other Portico crate (only on `libc`, and on
//! `tokio` for [`NsRuntime`]), so every one of them may use it (the
//! dataplane as a dev-dependency only).
//!
//! Invariants:
//! * every resource is owned by a guard that removes it on drop, also when a
//!   test panics: namespaces ([`Netns`]) are deleted by their unique name
//!   (which also destroys the veth ends inside them), processes
//!   ([`Process`]) are killed by PID, never by name, temporary directories
//!   ([`TempDir`]) are removed;
//! * names carry the process id and a per-process counter
//!   ([`unique_name`]), so tests running in parallel never collide;
//! * entering a namespace ([`in_netns`]) changes only a thread spawned for
//!   the purpose, never the caller's (likewise the thread of an
//!   [`NsRuntime`], whose tasks open their sockets in its namespace); a
//!   socket opened there stays in that namespace wherever it is used
//!   afterwards;
//! * all `unsafe` code (`setns`, raw sockets) is in the private `sys` module.
//!
//! Tests that need root call [`require_root`] first, and
//! [`require_programs`] for the programs they run; without root, `ip netns`
//! or a program, these write a loud `SKIPPED` banner to stderr and the test
//! returns. With `PORTICO_REQUIRE_ROOT=1` (set by `tests/run.sh` when it
//! runs as root, as CI does) a test that would skip fails instead: see
//! [`skip()`].
//!
//! Layout: `name.rs` (unique names), `skip.rs` (root check, skip policy),
//! `command.rs` (running programs), `ns.rs` (namespaces, entering one),
//! `veth.rs` (veth pairs), `process.rs` (process guards), `runtime.rs` (a
//! tokio runtime on a thread in a namespace), `wait.rs` (polling),
//! `temp_dir.rs`, `nginx.rs` (a backend web server), `bird.rs` (a BIRD 2
//! router driven through `birdc`), `raw_socket.rs` (a raw
//! `AF_PACKET` peer), `sys.rs` (the syscalls).

pub mod bird;
mod command;
pub mod gobgp;
mod name;
mod nginx;
mod ns;
mod process;
mod skip;
mod temp_dir;
mod veth;
mod wait;

#[cfg(target_os = "linux")]
mod raw_socket;
#[cfg(target_os = "linux")]
mod runtime;
#[cfg(target_os = "linux")]
mod sys;

pub use command::{have, run};
pub use name::unique_name;
pub use nginx::nginx;
pub use ns::Netns;
#[cfg(target_os = "linux")]
pub use ns::in_netns;
pub use process::Process;
#[cfg(target_os = "linux")]
pub use raw_socket::RawSocket;
#[cfg(target_os = "linux")]
pub use runtime::NsRuntime;
pub use skip::{require_programs, require_root, skip, skips_are_failures};
pub use temp_dir::TempDir;
pub use veth::{HostVeth, Veth, veth};
pub use wait::wait_until;
