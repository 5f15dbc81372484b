//! Where records go: the thread-local `HOT` cursor every recorder writes through ([`hot`]), the chunk
//! memory and its queues ([`pool`]), the threads' slots ([`registry`]) and what happens when a chunk is
//! full or a thread ends ([`thread`]: the slow path), the collector thread that encodes full chunks into
//! the file ([`collector`]) after selecting what `-F`/`-N`/`-D` keep ([`filter`]), the live printer on that thread ([`live`]), and the clock reads
//! ([`clock`]).
//!
//! Not here: producing records (`recorders`), changing code (`patch`), or deciding when the runtime
//! starts and stops (`lifecycle`). Nothing in this room names a recorder.

pub mod clock;
pub mod collector;
pub mod filter;
pub mod hot;
pub mod live;
pub mod pool;
pub mod registry;
pub mod thread;
