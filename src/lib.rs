pub use dentate_core::*;
