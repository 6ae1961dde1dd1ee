//! hwdb, the Homework stream database: see README.md for the query language and
//! PROTOCOL.md for the UDP RPC.

pub mod access;
pub mod client;
pub mod conns;
pub mod db;
pub mod exec;
pub mod notify;
pub mod pairing;
pub mod parse;
pub mod persist;
pub mod proto;
pub mod rate;
pub mod server;
pub mod table;
pub mod value;

/// The error of hwdb's own operations (mini-redis's model): anything that can say what went
/// wrong. What a statement did wrong is not an error of the server's: it is the client's
/// reply, text in a `status: "error"` message.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
pub type Result<T> = std::result::Result<T, Error>;
