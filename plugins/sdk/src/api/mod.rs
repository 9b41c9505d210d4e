//! Contour's API types (`projectcontour.io/v1`), as Isobar reads them.

mod httpproxy;

pub use httpproxy::*;
