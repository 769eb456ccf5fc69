//! The few `machine.MachineService` messages this tool speaks, written by hand with prost's
//! derive (no protoc at build time). Field numbers and types are those of Talos's own
//! `api/machine/machine.proto` and `api/common/common.proto` (v1.13.9, in
//! `../shared/talos/v1.13.9/api/`); the tests' stand-in compiles those files with grpcio-tools
//! and decodes what this client sends, so a wrong tag fails there.

/// `/machine.MachineService/ApplyConfiguration`.
pub const APPLY_CONFIGURATION: &str = "/machine.MachineService/ApplyConfiguration";
/// `/machine.MachineService/Version`.
pub const VERSION: &str = "/machine.MachineService/Version";

/// `machine.ApplyConfigurationRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ApplyConfigurationRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub data: Vec<u8>,
    #[prost(enumeration = "Mode", tag = "4")]
    pub mode: i32,
    #[prost(bool, tag = "5")]
    pub dry_run: bool,
    #[prost(message, optional, tag = "6")]
    pub try_mode_timeout: Option<Duration>,
}

/// `machine.ApplyConfigurationRequest.Mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Mode {
    Reboot = 0,
    Auto = 1,
    NoReboot = 2,
    Staged = 3,
    Try = 4,
}

impl Mode {
    /// The name Talos gives the mode (`AUTO`, `NO_REBOOT`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Mode::Reboot => "REBOOT",
            Mode::Auto => "AUTO",
            Mode::NoReboot => "NO_REBOOT",
            Mode::Staged => "STAGED",
            Mode::Try => "TRY",
        }
    }
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Duration {
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

/// `machine.ApplyConfigurationResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ApplyConfigurationResponse {
    #[prost(message, repeated, tag = "1")]
    pub messages: Vec<ApplyConfiguration>,
}

/// `machine.ApplyConfiguration`: one node's answer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ApplyConfiguration {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<Metadata>,
    #[prost(string, repeated, tag = "2")]
    pub warnings: Vec<String>,
    #[prost(enumeration = "Mode", tag = "3")]
    pub mode: i32,
    #[prost(string, tag = "4")]
    pub mode_details: String,
}

/// `common.Metadata` (its `google.rpc.Status` is left undecoded: `error` carries the text).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Metadata {
    #[prost(string, tag = "1")]
    pub hostname: String,
    #[prost(string, tag = "2")]
    pub error: String,
}

/// `google.protobuf.Empty`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

/// `machine.VersionResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct VersionResponse {
    #[prost(message, repeated, tag = "1")]
    pub messages: Vec<Version>,
}

/// `machine.Version`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Version {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<Metadata>,
    #[prost(message, optional, tag = "2")]
    pub version: Option<VersionInfo>,
}

/// `machine.VersionInfo`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct VersionInfo {
    #[prost(string, tag = "1")]
    pub tag: String,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use prost::Message;

    #[test]
    fn the_request_has_talos_field_numbers_on_the_wire() {
        let request = ApplyConfigurationRequest {
            data: b"v".to_vec(),
            mode: Mode::Auto as i32,
            dry_run: true,
            try_mode_timeout: None,
        };
        // data: tag 1 length-delimited (0x0a), mode: tag 4 varint (0x20), dry_run: tag 5 (0x28).
        assert_eq!(request.encode_to_vec(), [0x0a, 1, b'v', 0x20, 1, 0x28, 1]);
    }

    #[test]
    fn a_response_with_metadata_and_warnings_decodes() {
        let answer = ApplyConfigurationResponse {
            messages: vec![ApplyConfiguration {
                metadata: Some(Metadata {
                    hostname: "n".into(),
                    error: String::new(),
                }),
                warnings: vec!["w".into()],
                mode: Mode::NoReboot as i32,
                mode_details: "Applied configuration without a reboot".into(),
            }],
        };
        let again = ApplyConfigurationResponse::decode(answer.encode_to_vec().as_slice()).unwrap();
        assert_eq!(again, answer);
        assert_eq!(again.messages[0].mode(), Mode::NoReboot);
    }
}
