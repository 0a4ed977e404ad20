//! Errors of the profile, model and probe layers.

use std::path::PathBuf;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ModelError {
    #[error("{path}: cannot {what}: {source}")]
    Io {
        path: PathBuf,
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("profile {name}: {why}")]
    BadProfile { name: String, why: String },
    #[error("no profile named {0:?}; `numaio model --profiles` lists the shipped ones, or give a file path")]
    UnknownProfile(String),
    #[error("bad workload: {0}")]
    BadWorkload(String),
    #[error("probe: {0}")]
    Probe(String),
    #[error(transparent)]
    Sys(#[from] numaio_sys::SysError),
}

pub type ModelResult<T> = Result<T, ModelError>;
