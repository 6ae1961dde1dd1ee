//! hwdb, the Homework stream database: see README.md for the query language and
//! PROTOCOL.md for the UDP RPC.

pub mod access;
pub mod bench;
pub mod client;
pub mod db;
pub mod exec;
pub mod parse;
pub mod persist;
pub mod proto;
pub mod server;
pub mod table;
pub mod value;
