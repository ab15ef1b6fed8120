pub mod lease;
pub mod stats;
pub mod status;
pub mod store;
pub mod watch;
