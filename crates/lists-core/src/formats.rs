//! The input formats of each generator: the values of its `--format` flag and of a
//! `ListSources` list's `format`, declared once so that the record is checked against what the
//! generator it names will take.

use clap::ValueEnum;

/// The IP-to-ASN dataset formats `lists-gen-asn` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AsnFormat {
    Iptoasn,
    IpLocationDb,
    Geolite2,
}

impl AsnFormat {
    /// What the logs and errors call it.
    pub fn label(self) -> &'static str {
        match self {
            AsnFormat::Iptoasn => "iptoasn TSV",
            AsnFormat::IpLocationDb => "ip-location-db CSV",
            AsnFormat::Geolite2 => "GeoLite2-ASN CSV",
        }
    }
}

/// The Tor exit list formats `lists-gen-tor` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TorFormat {
    Bulk,
    ExitAddresses,
    Onionoo,
}

impl TorFormat {
    /// What the logs and errors call it.
    pub fn label(self) -> &'static str {
        match self {
            TorFormat::Bulk => "bulk exit list",
            TorFormat::ExitAddresses => "TorDNSEL exit-addresses",
            TorFormat::Onionoo => "Onionoo details",
        }
    }
}

/// Why `value` is not one of `F`'s formats, listing those it could be; `None` when it is one.
pub fn refusal<F: ValueEnum>(value: &str) -> Option<String> {
    if F::from_str(value, false).is_ok() {
        return None;
    }
    let known: Vec<String> = F::value_variants()
        .iter()
        .filter_map(|f| Some(f.to_possible_value()?.get_name().to_owned()))
        .collect();
    Some(format!("`{value}` is not one of {}", known.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_format_is_taken_by_its_flag_value_and_an_unknown_one_lists_the_others() {
        assert_eq!(refusal::<AsnFormat>("ip-location-db"), None);
        assert_eq!(refusal::<TorFormat>("exit-addresses"), None);
        assert_eq!(
            refusal::<TorFormat>("Bulk").as_deref(),
            Some("`Bulk` is not one of bulk, exit-addresses, onionoo")
        );
        assert!(refusal::<AsnFormat>("bulk").is_some());
    }
}
