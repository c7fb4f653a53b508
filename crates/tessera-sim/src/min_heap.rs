//! The engines' event queues' heap: [`tessera_core::min_heap`], where fair queuing's
//! orders use it too (issue 55), re-exported under the name the engines and the
//! bench's floor use.

pub use tessera_core::min_heap::{Keyed, MinHeap, Timed};
