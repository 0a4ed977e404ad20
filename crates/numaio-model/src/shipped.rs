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
