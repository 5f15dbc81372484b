//! One module per subcommand.

pub mod info;
pub mod list;
pub mod live;
pub mod record;
