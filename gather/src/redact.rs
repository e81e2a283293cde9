//! What never leaves the cluster: a Secret's data, tokens, passwords.
//!
//! Three layers, each applied to everything written:
//! - **structure**: a Secret becomes its name, type and list of keys; an
//!   `env` entry whose name says TOKEN, PASSWORD, SECRET (and a few more)
//!   keeps its name and `valueFrom` reference but loses a literal `value`;
//!   `binaryData` becomes its size and digest; the
//!   `last-applied-configuration` annotation and `managedFields` go;
//! - **known values**: every Secret value the gather could read in the
//!   namespaces it visits (never written) is replaced wherever it appears,
//!   as text or base64, in objects, logs and endpoint answers;
//! - **shapes**: `Bearer <token>`, `Basic <user:password>`,
//!   `token=<value>`-like pairs, `--token <value>`-like flags (in text and
//!   in a container's `args` and `command`), JWTs, and a literal env value
//!   shaped like a generated credential whatever its variable's name are
//!   replaced.

use base64::Engine as _;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

/// What replaces a redacted value.
pub const REDACTED: &str = "<redacted>";

/// Substrings of an env variable name that mark its value as a credential
/// (compared upper-case).
const SENSITIVE_NAMES: [&str; 8] = [
    "TOKEN",
    "PASSWORD",
    "PASSWD",
    "SECRET",
    "CREDENTIAL",
    "PRIVATE_KEY",
    "API_KEY",
    "APIKEY",
];

/// Suffixes of a `key=value` / `"key": "value"` key that mark the value as
/// a credential in free text (compared lower-case).
const SENSITIVE_KEY_SUFFIXES: [&str; 5] = ["token", "password", "passwd", "secret", "apikey"];

/// Shortest Secret value searched for in text: shorter ones (`true`, a
/// port) would redact ordinary words.
const MIN_KNOWN_VALUE: usize = 6;

/// Longest Secret value searched for: configs kept in Secrets are matched
/// by the tokens inside them, which are Secrets of their own.
const MAX_KNOWN_VALUE: usize = 16 * 1024;

/// True when an environment variable of this name holds a credential.
pub fn is_sensitive_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SENSITIVE_NAMES.iter().any(|s| upper.contains(s))
}

/// Redacts text and objects; holds the Secret values it must never write.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// (value, what it is) of every known Secret value, longest first.
    known: Vec<(String, String)>,
}

impl Redactor {
    /// Learns every value of a Secret object (`data` base64, `stringData`
    /// plain), so that none of them is ever written.
    pub fn learn_secret(&mut self, secret: &Value) {
        let name = format!(
            "{}/{}",
            secret["metadata"]["namespace"].as_str().unwrap_or(""),
            secret["metadata"]["name"].as_str().unwrap_or("")
        );
        let engine = base64::engine::general_purpose::STANDARD;
        if let Some(data) = secret["data"].as_object() {
            for (key, v) in data {
                let Some(encoded) = v.as_str() else { continue };
                if let Ok(bytes) = engine.decode(encoded) {
                    self.learn_bytes(&bytes, &format!("{name} {key}"));
                }
            }
        }
        if let Some(data) = secret["stringData"].as_object() {
            for (key, v) in data {
                if let Some(s) = v.as_str() {
                    self.learn_bytes(s.as_bytes(), &format!("{name} {key}"));
                }
            }
        }
        // Longest first, so a value inside a longer one never splits it.
        self.known
            .sort_by_key(|(v, _)| (std::cmp::Reverse(v.len()), v.clone()));
        self.known.dedup_by(|a, b| a.0 == b.0);
    }

    fn learn_bytes(&mut self, bytes: &[u8], what: &str) {
        let engine = base64::engine::general_purpose::STANDARD;
        let encoded = engine.encode(bytes);
        if encoded.len() >= MIN_KNOWN_VALUE && encoded.len() <= MAX_KNOWN_VALUE * 2 {
            self.known.push((encoded, what.to_string()));
        }
        if let Ok(text) = std::str::from_utf8(bytes) {
            // A token file often ends in a newline that logs do not show.
            let t = text.trim();
            if t.len() >= MIN_KNOWN_VALUE && t.len() <= MAX_KNOWN_VALUE {
                self.known.push((t.to_string(), what.to_string()));
            }
        }
    }

    /// How many Secret values are known.
    pub fn known_values(&self) -> usize {
        self.known.len()
    }

    /// `text` with every known Secret value, bearer token, credential-like
    /// `key=value` pair and JWT replaced.
    pub fn text(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (value, what) in &self.known {
            if out.contains(value.as_str()) {
                out = out.replace(
                    value.as_str(),
                    &format!("<redacted: value of Secret {what}>"),
                );
            }
        }
        let out = redact_bearer(&out);
        let out = redact_basic(&out);
        let out = redact_key_values(&out);
        let out = redact_flag_values(&out);
        redact_jwts(&out)
    }

    /// A copy of `object` fit to write: a Secret as its summary, credential
    /// env values, binary data and bookkeeping fields removed, and every
    /// string passed through [`Redactor::text`].
    pub fn object(&self, object: &Value) -> Value {
        let mut v = if object["kind"] == "Secret" {
            secret_summary(object)
        } else {
            object.clone()
        };
        strip_metadata(&mut v);
        redact_structure(&mut v);
        self.strings(&mut v);
        v
    }

    fn strings(&self, v: &mut Value) {
        match v {
            Value::String(s) => {
                let r = self.text(s);
                if r != *s {
                    *s = r;
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|x| self.strings(x)),
            Value::Object(o) => o.values_mut().for_each(|x| self.strings(x)),
            _ => {}
        }
    }
}

/// A Secret as name, namespace, labels, owners, type and the list of its
/// keys: never a value, never an annotation's value (one may hold the
/// whole object as last applied).
pub fn secret_summary(secret: &Value) -> Value {
    let meta = &secret["metadata"];
    let mut keys: Vec<String> = ["data", "stringData"]
        .iter()
        .filter_map(|f| secret[*f].as_object())
        .flat_map(|m| m.keys().cloned())
        .collect();
    keys.sort();
    keys.dedup();
    let annotations: Vec<String> = meta["annotations"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    let mut summary = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "creationTimestamp": meta["creationTimestamp"],
            "labels": meta["labels"],
            "ownerReferences": meta["ownerReferences"],
        },
        "type": secret["type"],
        "keys": keys,
        "annotationKeys": annotations,
        "note": "must-gather writes a Secret's name, type and keys only, never its data",
    });
    if let Some(m) = summary["metadata"].as_object_mut() {
        m.retain(|_, v| !v.is_null());
    }
    summary
}

/// Removes what only the API server needs and what may repeat a whole
/// object (`managedFields`, `last-applied-configuration`).
fn strip_metadata(v: &mut Value) {
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
        if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut)
            && let Some(x) = a.get_mut("kubectl.kubernetes.io/last-applied-configuration")
        {
            *x = json!(REDACTED);
        }
    }
}

/// Credential env values and binary data, anywhere in the object (pods,
/// pod templates of Deployments, ConfigMaps).
fn redact_structure(v: &mut Value) {
    match v {
        Value::Object(o) => {
            if let Some(Value::Array(env)) = o.get_mut("env") {
                for e in env.iter_mut() {
                    redact_env_entry(e);
                }
            }
            for key in ["args", "command"] {
                if let Some(Value::Array(list)) = o.get_mut(key) {
                    redact_flag_arguments(list);
                }
            }
            if let Some(Value::Object(bin)) = o.get_mut("binaryData") {
                summarise_binary(bin);
            }
            for x in o.values_mut() {
                redact_structure(x);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(redact_structure),
        _ => {}
    }
}

fn redact_env_entry(e: &mut Value) {
    let sensitive = e["name"].as_str().is_some_and(is_sensitive_name)
        || e["value"].as_str().is_some_and(looks_generated);
    if let Some(o) = e.as_object_mut()
        && sensitive
        && o.get("value").is_some_and(|v| !v.is_null())
    {
        o.insert("value".to_string(), json!(REDACTED));
    }
}

/// True for a value shaped like a generated credential: 32 or more hex
/// digits, or 16 or more characters of base64 with upper-case letters,
/// lower-case letters and digits all present. Addresses, image references,
/// versions, durations and Kubernetes names (lower-case, with dots, colons
/// or dashes) never are. A literal env value of this shape is redacted
/// whatever its variable is called.
pub fn looks_generated(value: &str) -> bool {
    let hex = value.len() >= 32 && value.bytes().all(|b| b.is_ascii_hexdigit());
    let base64 = value.len() >= 16
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+/=_-".contains(&b))
        && !value.starts_with('/')
        && value.bytes().any(|b| b.is_ascii_digit())
        && value.bytes().any(|b| b.is_ascii_uppercase())
        && value.bytes().any(|b| b.is_ascii_lowercase());
    hex || base64
}

/// True for a flag (`--token`, `-client-secret`) whose value is a credential.
fn is_sensitive_flag(arg: &str) -> bool {
    let name = arg.trim_start_matches('-');
    arg.starts_with('-')
        && !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && {
            let lower = name.to_ascii_lowercase();
            SENSITIVE_KEY_SUFFIXES.iter().any(|s| lower.ends_with(s)) && !lower.ends_with("file")
        }
}

/// `["--token", "VALUE"]` in a container's `args` or `command`: the value
/// after a credential flag replaced (`--token=VALUE` is one string and the
/// text rules catch it).
fn redact_flag_arguments(list: &mut [Value]) {
    for i in 1..list.len() {
        let flag = list[i - 1].as_str().is_some_and(is_sensitive_flag);
        if flag
            && let Some(v) = list[i].as_str()
            && !v.starts_with('-')
            && !v.starts_with('/')
            && !v.starts_with('<')
        {
            list[i] = json!(REDACTED);
        }
    }
}

/// `--token VALUE` (a credential flag, a space, its value) in free text, such
/// as a command line in a log, with the value replaced.
fn redact_flag_values(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("-") {
        let (before, from) = rest.split_at(at);
        out.push_str(before);
        let flag_len = from
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
            .count();
        let flag = &from[..flag_len];
        let after = &from[flag_len..];
        let spaces = after.len() - after.trim_start_matches([' ', '\t']).len();
        let value_len = after[spaces..]
            .bytes()
            .take_while(|b| !b.is_ascii_whitespace() && *b != b'"' && *b != b'\'' && *b != b',')
            .count();
        let value = &after[spaces..spaces + value_len];
        let starts_word = out
            .chars()
            .last()
            .is_none_or(|c| c.is_whitespace() || c == '"' || c == '\'' || c == '[' || c == ',');
        if starts_word
            && is_sensitive_flag(flag)
            && spaces > 0
            && value.len() >= 4
            && !value.starts_with(['-', '/', '<'])
        {
            out.push_str(flag);
            out.push_str(&after[..spaces]);
            out.push_str(REDACTED);
            rest = &after[spaces + value_len..];
        } else {
            let step = flag_len.max(1);
            out.push_str(&from[..step]);
            rest = &from[step..];
        }
    }
    out.push_str(rest);
    out
}

/// `Basic <base64 of user:password>` (any case) with the credentials
/// replaced; a word after "basic" that does not decode to `user:password`
/// stays ("basic authentication").
fn redact_basic(text: &str) -> String {
    let engine = base64::engine::general_purpose::STANDARD;
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while let Some(at) = lower[i..].find("basic") {
        let start = i + at + "basic".len();
        let rest = &text[start..];
        let spaces = rest.len() - rest.trim_start_matches([' ', '\t']).len();
        let len: usize = rest[spaces..]
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || b"+/=".contains(b))
            .count();
        let candidate = &rest[spaces..spaces + len];
        let credentials = spaces > 0
            && len >= 4
            && engine
                .decode(candidate)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .is_some_and(|s| s.contains(':'));
        if credentials {
            out.push_str(&text[i..start + spaces]);
            out.push_str(REDACTED);
            i = start + spaces + len;
        } else {
            out.push_str(&text[i..start]);
            i = start;
        }
    }
    out.push_str(&text[i..]);
    out
}

fn summarise_binary(bin: &mut Map<String, Value>) {
    let engine = base64::engine::general_purpose::STANDARD;
    for v in bin.values_mut() {
        if let Some(encoded) = v.as_str() {
            let bytes = engine.decode(encoded).unwrap_or_default();
            *v = json!(format!(
                "<{} bytes, sha256:{}>",
                bytes.len(),
                hex::encode(Sha256::digest(&bytes))
            ));
        }
    }
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-._~+/=".contains(c)
}

/// `Bearer <token>` (any case) with the token replaced.
fn redact_bearer(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while let Some(at) = lower[i..].find("bearer") {
        let start = i + at + "bearer".len();
        let rest = &text[start..];
        let spaces = rest.len() - rest.trim_start_matches([' ', '\t']).len();
        let token_len: usize = rest[spaces..]
            .chars()
            .take_while(|c| is_token_char(*c))
            .map(char::len_utf8)
            .sum();
        if spaces > 0 && token_len >= 8 {
            out.push_str(&text[i..start + spaces]);
            out.push_str(REDACTED);
            i = start + spaces + token_len;
        } else {
            out.push_str(&text[i..start]);
            i = start;
        }
    }
    out.push_str(&text[i..]);
    out
}

/// `…token=value`, `…password: value`, `"…secret": "value"` (keys ending in
/// a sensitive word, any case) with the value replaced.
fn redact_key_values(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c != b'=' && c != b':' {
            i += 1;
            continue;
        }
        // The key before the separator (an optional closing quote first).
        let mut k_end = i;
        if k_end > 0 && bytes[k_end - 1] == b'"' {
            k_end -= 1;
        }
        let mut k_start = k_end;
        while k_start > 0
            && (bytes[k_start - 1].is_ascii_alphanumeric()
                || bytes[k_start - 1] == b'_'
                || bytes[k_start - 1] == b'-')
        {
            k_start -= 1;
        }
        let key = text[k_start..k_end].to_ascii_lowercase();
        let sensitive = !key.is_empty()
            && SENSITIVE_KEY_SUFFIXES.iter().any(|s| key.ends_with(s))
            // `…_file`, `…_secret_name` style keys name a place, not a value.
            && !key.ends_with("file");
        if !sensitive {
            i += 1;
            continue;
        }
        // The value after the separator: optional spaces, optional quote.
        let mut v_start = i + 1;
        while v_start < bytes.len() && bytes[v_start] == b' ' {
            v_start += 1;
        }
        let quoted = v_start < bytes.len() && bytes[v_start] == b'"';
        if quoted {
            v_start += 1;
        }
        let mut v_end = v_start;
        while v_end < bytes.len() {
            let b = bytes[v_end];
            let stop = if quoted {
                b == b'"'
            } else {
                b == b' ' || b == b',' || b == b'}' || b == b'\n' || b == b'\r' || b == b'&'
            };
            if stop {
                break;
            }
            v_end += 1;
        }
        let value = &text[v_start..v_end];
        // A value that is already redacted or plainly not a credential
        // (empty, a reference to a file) stays.
        let plain =
            matches!(value, "true" | "false" | "null") || value.bytes().all(|b| b.is_ascii_digit());
        if value.len() >= 4 && !plain && !value.starts_with('<') && !value.starts_with('/') {
            out.push_str(&text[last..v_start]);
            out.push_str(REDACTED);
            last = v_end;
        }
        i = v_end.max(i + 1);
    }
    out.push_str(&text[last..]);
    out
}

/// JSON Web Tokens (`eyJ….….…`) replaced.
fn redact_jwts(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while let Some(at) = text[i..].find("eyJ") {
        let start = i + at;
        let len: usize = text[start..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_' || *c == '.')
            .map(char::len_utf8)
            .sum();
        let candidate = &text[start..start + len];
        let parts: Vec<&str> = candidate.split('.').collect();
        if parts.len() == 3 && parts.iter().all(|p| p.len() >= 4) && len >= 20 {
            out.push_str(&text[i..start]);
            out.push_str(REDACTED);
        } else {
            out.push_str(&text[i..start + len.max(3)]);
        }
        i = start + len.max(3);
    }
    out.push_str(&text[i..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "lab-proxy-push-token", "namespace": "oooi",
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"data\":{\"token\":\"c3VwZXJzZWNyZXR0b2tlbg==\"}}"}},
            "type": "Opaque",
            "data": {"token": "c3VwZXJzZWNyZXR0b2tlbg=="},
        })
    }

    #[test]
    fn a_secret_is_written_as_name_type_and_keys_only() {
        let r = Redactor::default();
        let out = serde_json::to_string(&r.object(&secret())).unwrap();
        assert!(out.contains("lab-proxy-push-token"));
        assert!(out.contains("\"keys\":[\"token\"]"));
        assert!(!out.contains("c3VwZXJzZWNyZXR0b2tlbg"), "{out}");
        assert!(!out.contains("supersecrettoken"), "{out}");
    }

    #[test]
    fn known_secret_values_are_replaced_in_text_plain_and_base64() {
        let mut r = Redactor::default();
        r.learn_secret(&secret());
        let out = r.text("pushed with supersecrettoken; config c3VwZXJzZWNyZXR0b2tlbg== done");
        assert!(!out.contains("supersecrettoken"), "{out}");
        assert!(!out.contains("c3VwZXJzZWNyZXR0b2tlbg"), "{out}");
        assert!(out.contains("<redacted: value of Secret oooi/lab-proxy-push-token token>"));
    }

    #[test]
    fn credential_env_literals_are_redacted_and_references_kept() {
        let r = Redactor::default();
        let pod = json!({"kind": "Pod", "spec": {"containers": [{"name": "c", "env": [
            {"name": "OOOI_PUSH_TOKEN", "value": "literal-token-value"},
            {"name": "DB_PASSWORD", "value": "hunter22"},
            {"name": "PAIR_TOKEN", "valueFrom": {"secretKeyRef": {"name": "x", "key": "token"}}},
            {"name": "POD_IP", "value": "10.0.0.1"},
        ]}]}});
        let out = r.object(&pod);
        let env = &out["spec"]["containers"][0]["env"];
        assert_eq!(env[0]["value"], REDACTED);
        assert_eq!(env[1]["value"], REDACTED);
        assert_eq!(env[2]["valueFrom"]["secretKeyRef"]["name"], "x");
        assert_eq!(env[3]["value"], "10.0.0.1");
    }

    #[test]
    fn bearer_tokens_key_values_and_jwts_are_redacted_in_logs() {
        let r = Redactor::default();
        let log = "GET / Authorization: Bearer abcdefgh12345678 ok\n\
                   push_token=s3cr3tvalue next=1\n\
                   {\"password\": \"pa55word!\", \"user\": \"me\"}\n\
                   jwt eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl end\n\
                   token_file=/var/run/token bearer of news";
        let out = r.text(log);
        for secret in [
            "abcdefgh12345678",
            "s3cr3tvalue",
            "pa55word!",
            "eyJzdWIiOiJ4In0",
        ] {
            assert!(!out.contains(secret), "{secret} in {out}");
        }
        assert!(out.contains("next=1"));
        assert!(out.contains("\"user\": \"me\""));
        assert!(out.contains("token_file=/var/run/token"), "{out}");
        assert!(out.contains("bearer of news"), "{out}");
    }

    #[test]
    fn token_flags_basic_credentials_and_generated_literals_are_redacted() {
        let r = Redactor::default();
        let pod = json!({"kind": "Pod", "spec": {"containers": [{"name": "c",
        "args": ["run", "--token", "s3cr3t-flag-value", "--token-file", "/var/run/t", "--verbose", "--push-token", "--x"],
        "command": ["agent", "-client-secret", "cl13nt-s3cr3t"],
        "env": [
            {"name": "OOOI_CONFIG", "value": "0123456789abcdef0123456789abcdef"},
            {"name": "AUTH", "value": "dXNlcjpwYXNzd29yZDEyMzQ1Ng=="},
            {"name": "OOOI_DNS_IMAGE", "value": "registry.example.com/oooi/oooi-dns:0.1.0@sha256:0123456789abcdef"},
            {"name": "RUST_LOG", "value": "info,kube=warn"},
            {"name": "POD_NAMESPACE", "value": "clusters-c1-infra-namespace2"},
        ]}]}});
        let out = r.object(&pod);
        let c = &out["spec"]["containers"][0];
        assert_eq!(
            c["args"],
            json!([
                "run",
                "--token",
                REDACTED,
                "--token-file",
                "/var/run/t",
                "--verbose",
                "--push-token",
                "--x"
            ])
        );
        assert_eq!(c["command"], json!(["agent", "-client-secret", REDACTED]));
        let env = &c["env"];
        assert_eq!(
            env[0]["value"], REDACTED,
            "a generated value under a neutral name"
        );
        assert_eq!(env[1]["value"], REDACTED);
        assert!(
            env[2]["value"]
                .as_str()
                .unwrap()
                .starts_with("registry.example.com/")
        );
        assert_eq!(env[3]["value"], "info,kube=warn");
        assert_eq!(env[4]["value"], "clusters-c1-infra-namespace2");

        let log = "exec /agent --token abcd1234efgh --peer-token=zzzz9999yyyy --tokens 3\n\
                   Authorization: Basic dXNlcjpwYXNzd29yZA== then basic authentication\n\
                   non-token --token\n";
        let out = r.text(log);
        for secret in ["abcd1234efgh", "zzzz9999yyyy", "dXNlcjpwYXNzd29yZA=="] {
            assert!(!out.contains(secret), "{secret} in {out}");
        }
        assert!(out.contains("--tokens 3"), "{out}");
        assert!(out.contains("basic authentication"), "{out}");
        assert!(out.contains("non-token --token\n"), "{out}");
    }

    #[test]
    fn binary_data_becomes_size_and_digest() {
        let r = Redactor::default();
        let cm = json!({"kind": "ConfigMap", "binaryData": {"f.wasm": "AGFzbQEAAAA="}});
        let out = r.object(&cm);
        let s = out["binaryData"]["f.wasm"].as_str().unwrap();
        assert!(s.starts_with("<8 bytes, sha256:"), "{s}");
    }

    #[test]
    fn managed_fields_and_last_applied_go() {
        let r = Redactor::default();
        let cm = json!({"kind": "ConfigMap", "metadata": {"name": "x", "managedFields": [{}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}", "a": "b"}}});
        let out = r.object(&cm);
        assert!(out["metadata"].get("managedFields").is_none());
        assert_eq!(
            out["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"],
            REDACTED
        );
        assert_eq!(out["metadata"]["annotations"]["a"], "b");
    }
}
