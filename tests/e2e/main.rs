//! End-to-end tests: a real `svcd` on a free port with a temporary data directory, used over
//! HTTP and through its command line as a user would. One test binary, one module per area.

mod auth;
mod bad_input;
mod catalogues;
mod cli;
mod fixture;
mod harness;
mod load;
mod ownership;
mod robustness;
mod search;
mod stac;
mod userdata;
