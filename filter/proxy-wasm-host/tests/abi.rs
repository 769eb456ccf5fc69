//! ABI conformance of the host, on a small module written in WAT: configuration buffers,
//! header maps, properties, local responses, metrics, shared data with CAS, time, refusal of
//! unknown imports, fault injection and crashes.

// Helpers outside #[test] fns may unwrap too: a failure there is a failed test.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use proxy_wasm_host::{Host, HostConfig, HostError, Outcome, Request};

/// A module that exercises the hostcalls:
/// - on_configure: reads the plugin configuration, logs it at INFO, refuses "reject";
///   defines the counter "requests" and the gauges "last_cas" and "now".
/// - on_request_headers: counts the request; reads `:path` (failing open, with an ERROR log, if
///   that fails); reads `source.address`; "/local" gets a 403 whose body is the address and whose
///   header is x-a: b; "/trap" traps; anything else continues with `x-seen: <address>` added.
/// - on_tick: first tick sets shared "k" = "v1"; later ticks set it with the CAS just read, then
///   again with the same (stale) CAS and record that second status in "last_cas"; records the
///   clock in "now".
const TEST_MODULE: &str = r#"
(module
  (import "env" "proxy_log" (func $log (param i32 i32 i32) (result i32)))
  (import "env" "proxy_get_buffer_bytes" (func $get_buffer (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_header_map_value" (func $get_header (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_add_header_map_value" (func $add_header (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_property" (func $get_property (param i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_send_local_response" (func $local (param i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_define_metric" (func $define (param i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_increment_metric" (func $increment (param i32 i64) (result i32)))
  (import "env" "proxy_record_metric" (func $record (param i32 i64) (result i32)))
  (import "env" "proxy_get_shared_data" (func $get_shared (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_set_shared_data" (func $set_shared (param i32 i32 i32 i32 i32) (result i32)))
  (import "env" "proxy_get_current_time_nanoseconds" (func $now (param i32) (result i32)))
  (memory (export "memory") 4)
  (data (i32.const 1024) ":path")
  (data (i32.const 1040) "source\00address")
  (data (i32.const 1060) "x-seen")
  (data (i32.const 1070) "requests")
  (data (i32.const 1080) "last_cas")
  (data (i32.const 1090) "now")
  (data (i32.const 1100) "\01\00\00\00\03\00\00\00\01\00\00\00x-a\00b\00")
  (data (i32.const 1200) "k")
  (data (i32.const 1210) "v1")
  (data (i32.const 1220) "header read failed")
  (global $heap (mut i32) (i32.const 65536))
  (global $requests (mut i32) (i32.const 0))
  (global $last_cas (mut i32) (i32.const 0))
  (global $clock (mut i32) (i32.const 0))
  (func (export "proxy_abi_version_0_2_1"))
  (func (export "proxy_on_memory_allocate") (param $size i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (i32.add (local.get $size) (i32.const 8))))
    (local.get $p))
  (func (export "proxy_on_context_create") (param i32 i32))
  (func (export "proxy_on_vm_start") (param i32 i32) (result i32) (i32.const 1))
  (func (export "proxy_on_configure") (param $root i32) (param $size i32) (result i32)
    (if (i32.ne (call $get_buffer (i32.const 7) (i32.const 0) (local.get $size) (i32.const 0) (i32.const 4)) (i32.const 0))
      (then (return (i32.const 0))))
    (drop (call $log (i32.const 2) (i32.load (i32.const 0)) (i32.load (i32.const 4))))
    (if (i32.eq (local.get $size) (i32.const 6)) (then (return (i32.const 0))))
    (drop (call $define (i32.const 0) (i32.const 1070) (i32.const 8) (i32.const 12)))
    (global.set $requests (i32.load (i32.const 12)))
    (drop (call $define (i32.const 1) (i32.const 1080) (i32.const 8) (i32.const 12)))
    (global.set $last_cas (i32.load (i32.const 12)))
    (drop (call $define (i32.const 1) (i32.const 1090) (i32.const 3) (i32.const 12)))
    (global.set $clock (i32.load (i32.const 12)))
    (i32.const 1))
  (func (export "proxy_on_request_headers") (param $ctx i32) (param $n i32) (param $eos i32) (result i32)
    (local $path_len i32)
    (drop (call $increment (global.get $requests) (i64.const 1)))
    (if (i32.ne (call $get_header (i32.const 0) (i32.const 1024) (i32.const 5) (i32.const 0) (i32.const 4)) (i32.const 0))
      (then
        (drop (call $log (i32.const 4) (i32.const 1220) (i32.const 18)))
        (return (i32.const 0))))
    (local.set $path_len (i32.load (i32.const 4)))
    (drop (call $get_property (i32.const 1040) (i32.const 14) (i32.const 16) (i32.const 20)))
    (if (i32.eq (local.get $path_len) (i32.const 5)) (then unreachable))
    (if (i32.eq (local.get $path_len) (i32.const 6))
      (then
        (drop (call $local (i32.const 403) (i32.const 0) (i32.const 0)
          (i32.load (i32.const 16)) (i32.load (i32.const 20)) (i32.const 1100) (i32.const 22) (i32.const -1)))
        (return (i32.const 1))))
    (drop (call $add_header (i32.const 0) (i32.const 1060) (i32.const 6) (i32.load (i32.const 16)) (i32.load (i32.const 20))))
    (i32.const 0))
  (func (export "proxy_on_tick") (param $root i32)
    (local $cas i32)
    (if (i32.eq (call $get_shared (i32.const 1200) (i32.const 1) (i32.const 0) (i32.const 4) (i32.const 8)) (i32.const 1))
      (then (drop (call $set_shared (i32.const 1200) (i32.const 1) (i32.const 1210) (i32.const 2) (i32.const 0))))
      (else
        (local.set $cas (i32.load (i32.const 8)))
        (drop (call $set_shared (i32.const 1200) (i32.const 1) (i32.const 1210) (i32.const 2) (local.get $cas)))
        (drop (call $record (global.get $last_cas)
          (i64.extend_i32_u (call $set_shared (i32.const 1200) (i32.const 1) (i32.const 1210) (i32.const 2) (local.get $cas)))))))
    (drop (call $now (i32.const 32)))
    (drop (call $record (global.get $clock) (i64.load (i32.const 32)))))
)
"#;

fn module() -> Vec<u8> {
    wat::parse_str(TEST_MODULE).expect("the test module is valid WAT")
}

fn host(plugin_config: &str) -> Host {
    let config = HostConfig {
        plugin_config: plugin_config.as_bytes().to_vec(),
        ..HostConfig::default()
    };
    Host::from_bytes(&module(), config).expect("the test module loads")
}

#[test]
fn configuration_reaches_on_configure_and_a_refusal_is_reported() {
    let host = host("hello");
    assert!(
        host.logs().contains(&(2, "hello".to_owned())),
        "{:?}",
        host.logs()
    );
    let err = Host::from_bytes(
        &module(),
        HostConfig {
            plugin_config: b"reject".to_vec(),
            ..HostConfig::default()
        },
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            HostError::Rejected {
                callback: "proxy_on_configure"
            }
        ),
        "{err}"
    );
}

#[test]
fn reconfigure_makes_a_new_root_context_in_the_same_vm() {
    let mut host = host("first");
    host.request(Request::get("/")).unwrap();
    assert!(
        !host.reconfigure(b"reject".to_vec()).unwrap(),
        "a refused configuration says so"
    );
    assert!(host.reconfigure(b"second!".to_vec()).unwrap());
    assert!(host.logs().contains(&(2, "second!".to_owned())));
    // Same VM: the metric defined by the first configuration keeps its value.
    host.request(Request::get("/")).unwrap();
    assert_eq!(host.metrics()["requests"], 2);
}

#[test]
fn a_continued_request_carries_the_header_changes_and_the_source_address() {
    let mut host = host("x");
    let outcome = host
        .request(
            Request::get("/")
                .header("Accept", "text/html")
                .from_address("[2001:db8::1]:5678"),
        )
        .unwrap();
    let Outcome::Continue { headers } = outcome else {
        panic!("expected Continue, got {outcome:?}")
    };
    assert_eq!(
        &headers[..4],
        &[
            (":method".to_owned(), "GET".to_owned()),
            (":path".to_owned(), "/".to_owned()),
            (":authority".to_owned(), "localhost".to_owned()),
            (":scheme".to_owned(), "http".to_owned()),
        ]
    );
    assert!(
        headers.contains(&("accept".to_owned(), "text/html".to_owned())),
        "names are lower-cased"
    );
    assert!(headers.contains(&("x-seen".to_owned(), "[2001:db8::1]:5678".to_owned())));
    assert_eq!(host.metrics()["requests"], 1);
}

#[test]
fn a_local_response_is_returned_with_its_status_headers_and_body() {
    let mut host = host("x");
    let outcome = host
        .request(Request::get("/local").from_address("203.0.113.9:4000"))
        .unwrap();
    assert_eq!(
        outcome,
        Outcome::Local {
            status: 403,
            headers: vec![("x-a".to_owned(), "b".to_owned())],
            body: b"203.0.113.9:4000".to_vec(),
        }
    );
}

#[test]
fn an_injected_fault_makes_the_named_hostcall_fail() {
    let config = HostConfig {
        plugin_config: b"x".to_vec(),
        fault: Some("proxy_get_header_map_value".to_owned()),
        ..HostConfig::default()
    };
    let mut host = Host::from_bytes(&module(), config).unwrap();
    let outcome = host.request(Request::get("/local")).unwrap();
    let Outcome::Continue { headers } = outcome else {
        panic!("the module fails open: {outcome:?}")
    };
    assert!(!headers.iter().any(|(k, _)| k == "x-seen"));
    assert!(host.logs().contains(&(4, "header read failed".to_owned())));
    host.set_fault(None);
    assert!(matches!(
        host.request(Request::get("/local")).unwrap(),
        Outcome::Local { .. }
    ));
}

#[test]
fn shared_data_compare_and_swap_and_the_manual_clock() {
    let mut host = host("x");
    host.set_time_nanos(42);
    host.tick().unwrap();
    assert_eq!(host.shared_data("k"), Some((b"v1".to_vec(), 1)));
    assert_eq!(host.metrics()["now"], 42);
    host.set_time_nanos(1_700_000_000_000_000_000);
    host.tick().unwrap();
    // Set with the CAS it read (ok, CAS 2), then again with that stale CAS: CAS_MISMATCH (8).
    assert_eq!(host.shared_data("k"), Some((b"v1".to_vec(), 2)));
    assert_eq!(host.metrics()["last_cas"], 8);
    assert_eq!(host.metrics()["now"], 1_700_000_000_000_000_000);
}

#[test]
fn a_trap_crashes_the_vm_as_in_envoy() {
    let mut host = host("x");
    let err = host.request(Request::get("/trap")).unwrap_err();
    assert!(
        matches!(
            err,
            HostError::Trap {
                callback: "proxy_on_request_headers",
                ..
            }
        ),
        "{err}"
    );
    assert!(matches!(
        host.request(Request::get("/")).unwrap_err(),
        HostError::Crashed(_)
    ));
}

#[test]
fn a_module_importing_an_unknown_function_is_refused_by_name() {
    for (module, name) in [
        ("env", "proxy_continue_request"),
        ("env", "proxy_made_up"),
        ("wasi_snapshot_preview1", "path_open"),
    ] {
        let wat = format!(
            r#"(module (import "{module}" "{name}" (func (param i32) (result i32)))
                 (memory (export "memory") 1)
                 (func (export "proxy_abi_version_0_2_1"))
                 (func (export "proxy_on_memory_allocate") (param i32) (result i32) (i32.const 0)))"#
        );
        let err =
            Host::from_bytes(&wat::parse_str(&wat).unwrap(), HostConfig::default()).unwrap_err();
        match &err {
            HostError::UnknownImport { module: m, name: n } => {
                assert_eq!((m.as_str(), n.as_str()), (module, name))
            }
            other => panic!("expected UnknownImport, got {other}"),
        }
        assert!(err.to_string().contains(&format!("{module}.{name}")));
    }
}

#[test]
fn a_module_without_the_abi_marker_is_refused() {
    let wat = r#"(module (memory (export "memory") 1)
        (func (export "proxy_on_memory_allocate") (param i32) (result i32) (i32.const 0)))"#;
    let err = Host::from_bytes(&wat::parse_str(wat).unwrap(), HostConfig::default()).unwrap_err();
    assert!(err.to_string().contains("proxy_abi_version_0_2_1"), "{err}");
}

/// What Envoy does before any filter, with `use_remote_address` and `xff_num_trusted_hops`:
/// the client address filters see, the peer appended to X-Forwarded-For, X-Forwarded-Proto
/// trusted only from trusted proxies (and `:scheme` following it).
#[test]
fn the_client_address_and_scheme_are_derived_as_envoy_derives_them() {
    let seen = |hops: u32, request: Request| -> Vec<(String, String)> {
        let config = HostConfig {
            plugin_config: b"x".to_vec(),
            xff_num_trusted_hops: hops,
            ..HostConfig::default()
        };
        let mut host = Host::from_bytes(&module(), config).unwrap();
        match host.request(request).unwrap() {
            Outcome::Continue { headers } => headers,
            other => panic!("expected Continue, got {other:?}"),
        }
    };
    let get = |headers: &[(String, String)], name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let behind_lb = || {
        Request::get("/")
            .from_address("10.0.0.5:40000")
            .header("X-Forwarded-For", "6.6.6.6, 203.0.113.9")
            .header("X-Forwarded-Proto", "https")
    };
    // No trusted hop: the peer, whatever XFF says; XFP from the connection.
    let h = seen(0, behind_lb());
    assert_eq!(get(&h, "x-seen").as_deref(), Some("10.0.0.5:40000"));
    assert_eq!(
        get(&h, "x-forwarded-for").as_deref(),
        Some("6.6.6.6, 203.0.113.9, 10.0.0.5")
    );
    assert_eq!(get(&h, "x-forwarded-proto").as_deref(), Some("http"));
    assert_eq!(get(&h, ":scheme").as_deref(), Some("http"));
    // One trusted proxy: the address it appended, port 0; its XFP is believed.
    let h = seen(1, behind_lb());
    assert_eq!(get(&h, "x-seen").as_deref(), Some("203.0.113.9:0"));
    assert_eq!(get(&h, "x-forwarded-proto").as_deref(), Some("https"));
    assert_eq!(get(&h, ":scheme").as_deref(), Some("https"));
    assert_eq!(
        get(&seen(2, behind_lb()), "x-seen").as_deref(),
        Some("6.6.6.6:0")
    );
    // Fewer entries than trusted hops, or not an address: the peer.
    assert_eq!(
        get(&seen(3, behind_lb()), "x-seen").as_deref(),
        Some("10.0.0.5:40000")
    );
    let junk = Request::get("/")
        .from_address("10.0.0.5:40000")
        .header("x-forwarded-for", "junk");
    assert_eq!(
        get(&seen(1, junk), "x-seen").as_deref(),
        Some("10.0.0.5:40000")
    );
}
