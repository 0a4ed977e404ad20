//! Profiles of the seed publications' machines, built from their published numbers (marked
//! `origin: published`), shipped inside the binary.

use crate::error::{ModelError, ModelResult};
use crate::profile::Profile;
use std::path::Path;

/// `(name, JSON)` of every shipped profile.
pub const SHIPPED: &[(&str, &str)] = &[
    ("adams", include_str!("../profiles/adams.json")),
    ("jericho", include_str!("../profiles/jericho.json")),
    ("tofalos", include_str!("../profiles/tofalos.json")),
    ("zonfs", include_str!("../profiles/zonfs.json")),
];

/// A shipped profile by name.
pub fn shipped(name: &str) -> ModelResult<Profile> {
    let (_, text) = SHIPPED
        .iter()
        .find(|(n, _)| *n == name)
        .ok_or_else(|| ModelError::UnknownProfile(name.to_string()))?;
    Profile::from_json(text)
}

/// A shipped profile by name, or else a profile file.
pub fn load(name_or_path: &str) -> ModelResult<Profile> {
    if SHIPPED.iter().any(|(n, _)| *n == name_or_path) {
        return shipped(name_or_path);
    }
    let path = Path::new(name_or_path);
    if path.exists() {
        return Profile::load(path);
    }
    Err(ModelError::UnknownProfile(name_or_path.to_string()))
}

/// Where this machine's own profile is kept: `$NUMAIO_PROFILE`, else
/// `/var/lib/numaio/profile.json` (written by `numaio probe --save`).
pub fn local_profile_path() -> std::path::PathBuf {
    std::env::var_os("NUMAIO_PROFILE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("/var/lib/numaio/profile.json"))
}

/// This machine's profile if one is saved and matches the machine; otherwise one built from
/// the SLIT distances. The string says which, and why a saved one was refused.
pub fn local_or_slit(topo: &numaio_sys::Topology) -> (Profile, String) {
    let path = local_profile_path();
    match Profile::load(&path) {
        Ok(p) => match p.matches(topo) {
            crate::profile::MachineMatch::Same => {
                let why = format!("profile {}", path.display());
                (p, why)
            }
            crate::profile::MachineMatch::Different(w) => (
                Profile::from_distances(topo),
                format!(
                    "SLIT distances ({} is from another machine: {})",
                    path.display(),
                    w.join("; ")
                ),
            ),
        },
        Err(ModelError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => (
            Profile::from_distances(topo),
            "SLIT distances (no saved profile)".into(),
        ),
        Err(e) => (
            Profile::from_distances(topo),
            format!("SLIT distances ({e})"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Origin;

    #[test]
    fn all_shipped_profiles_load_and_are_published() {
        for (name, _) in SHIPPED {
            let p = shipped(name).unwrap();
            assert_eq!(&p.name, name);
            assert_eq!(p.origin, Origin::Published);
            assert!(!p.source.is_empty());
        }
        assert!(matches!(load("nope"), Err(ModelError::UnknownProfile(_))));
    }
}
