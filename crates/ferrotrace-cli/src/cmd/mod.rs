//! One module per subcommand.

pub mod info;
pub mod list;
pub mod live;
pub mod profile;
pub mod record;
