//! What Envoy's connection manager does to a request before any filter sees it.

use std::collections::HashMap;

use crate::host::Request;
use crate::state::Stream;

/// What Envoy's connection manager makes of a request before any filter runs, with
/// `use_remote_address: true` (as Istio's gateways run) and `xff_num_trusted_hops` = `hops`:
/// - the trusted client address: the peer when `hops` is 0; else the `hops`-th address from the
///   right of the incoming `X-Forwarded-For`, or the peer when there are fewer or it is not an
///   address (Envoy `docs/root/configuration/http/http_conn_man/headers.rst`, x-forwarded-for).
///   Filters see it as `source.address`: `ActiveStream::decodeHeaders` calls
///   `setDownstreamRemoteAddress(mutate_result.final_remote_address)`
///   (`source/common/http/conn_manager_impl.cc`); an address taken from XFF has port 0;
/// - the peer appended to `X-Forwarded-For`;
/// - `X-Forwarded-Proto` kept from downstream only when `hops` > 0 (and `http` or `https`),
///   else set from the connection; for HTTP/1, `:scheme` follows it (same page, x-forwarded-proto
///   and :scheme).
///
/// Returns the header map (pseudo-headers first) and the `source.address` value.
pub(super) fn envoy_view(request: &Request, hops: u32) -> (Vec<(String, String)>, String) {
    let mut headers: Vec<(String, String)> = request
        .headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
        .collect();
    let peer: Option<std::net::SocketAddr> = request.source_address.parse().ok();
    let incoming: Vec<&str> = headers
        .iter()
        .filter(|(k, _)| k == "x-forwarded-for")
        .map(|(_, v)| v.as_str())
        .collect();
    let mut xff = incoming.join(", ");
    // Only trusted hops make Envoy read the entries; otherwise it only appends the peer.
    let from_xff = match usize::try_from(hops) {
        Ok(n) if n > 0 => {
            let entries: Vec<&str> = xff.split(',').map(str::trim).collect();
            entries
                .len()
                .checked_sub(n)
                .and_then(|i| entries[i].parse::<std::net::IpAddr>().ok())
        }
        _ => None,
    };
    let source = match from_xff {
        Some(ip) => std::net::SocketAddr::new(ip, 0).to_string(),
        None => request.source_address.clone(),
    };
    if let Some(peer) = peer {
        if !xff.is_empty() {
            xff.push_str(", ");
        }
        xff.push_str(&peer.ip().to_string());
        headers.retain(|(k, _)| k != "x-forwarded-for");
        headers.push(("x-forwarded-for".to_owned(), xff));
    }
    let trusted_proto = headers
        .iter()
        .find(|(k, _)| k == "x-forwarded-proto")
        .map(|(_, v)| v.trim().to_ascii_lowercase())
        .filter(|v| hops > 0 && (v == "http" || v == "https"));
    let proto = trusted_proto.unwrap_or_else(|| request.scheme.clone());
    headers.retain(|(k, _)| k != "x-forwarded-proto");
    headers.push(("x-forwarded-proto".to_owned(), proto.clone()));
    let mut map = vec![
        (":method".to_owned(), request.method.clone()),
        (":path".to_owned(), request.path.clone()),
        (":authority".to_owned(), request.authority.clone()),
        (":scheme".to_owned(), proto),
    ];
    map.extend(headers);
    (map, source)
}

/// The stream's state: its header map is built once from the request, as a codec builds
/// Envoy's (the request itself is not copied).
pub(super) fn stream_for(request: &Request, context: i32, hops: u32) -> Stream {
    let (headers, source) = envoy_view(request, hops);
    let mut properties = HashMap::new();
    let mut text = |name: &str, value: &str| {
        properties.insert(name.to_owned(), value.as_bytes().to_vec());
    };
    let (url_path, query) = request.path.split_once('?').unwrap_or((&request.path, ""));
    text("source.address", &source);
    text("request.path", &request.path);
    text("request.url_path", url_path);
    text("request.query", query);
    text("request.host", &request.authority);
    text("request.scheme", &request.scheme);
    text("request.method", &request.method);
    text("request.protocol", "HTTP/1.1");
    text("request.id", &format!("edgepop-{context}"));
    for (header, property) in [
        ("user-agent", "request.useragent"),
        ("referer", "request.referer"),
    ] {
        if let Some((_, v)) = headers.iter().find(|(k, _)| k == header) {
            properties.insert(property.to_owned(), v.as_bytes().to_vec());
        }
    }
    if let Some(port) = request
        .source_address
        .rsplit_once(':')
        .and_then(|(_, port)| port.parse::<u16>().ok())
    {
        properties.insert(
            "source.port".to_owned(),
            i64::from(port).to_le_bytes().to_vec(),
        );
    }
    Stream {
        request_headers: headers,
        request_body: Vec::new(),
        request_trailers: Vec::new(),
        response_headers: Vec::new(),
        response_body: Vec::new(),
        response_trailers: Vec::new(),
        properties,
        local: None,
        end_of_stream: request.body.is_none(),
    }
}
