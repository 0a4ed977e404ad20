//! The daemon's TOML configuration: parsing and validating any text neither panics nor
//! hangs, a configuration that validates holds only finite numbers, and written back as
//! TOML it reads back the same.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_proc::config::Config;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    let Ok(c) = Config::from_toml(&s, Path::new("fuzz.toml")) else {
        return;
    };
    if c.validate().is_err() {
        return;
    }
    let value = toml::Value::try_from(&c).expect("a Config serializes");
    assert_finite(&value, &s);
    if let Ok(text) = toml::to_string(&c) {
        let back = Config::from_toml(&text, Path::new("fuzz.toml"))
            .unwrap_or_else(|e| panic!("written config does not parse: {e}\n{text}"));
        assert_eq!(back, c, "round trip of {s:?} via {text:?}");
    }
});

fn assert_finite(v: &toml::Value, input: &str) {
    match v {
        toml::Value::Float(f) => assert!(f.is_finite(), "validate() accepted {f} from {input:?}"),
        toml::Value::Array(a) => a.iter().for_each(|x| assert_finite(x, input)),
        toml::Value::Table(t) => t.values().for_each(|x| assert_finite(x, input)),
        _ => {}
    }
}
