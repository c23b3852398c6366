//! One request frame, from its bytes to the handler's reply: the request
//! header is decoded, the API key checked, the SASL gate applied, then the
//! body decoded and dispatched ([`crate::api`]). The listener
//! ([`crate::server`]) calls [`handle`] for every frame it reads; the fuzz
//! target and the mutation test call [`answer_frame`], which runs the same
//! code without a socket.
//!
//! Invariants:
//! - Nothing here panics or aborts on any frame: every length and count in
//!   the header and body is checked against the bytes present before
//!   anything is allocated for it (the patched `kafka-protocol`, see
//!   `vendor/kafka-protocol/PATCHED.md`), and a frame that cannot be read
//!   is an `Err` (the listener closes the connection).
//! - A frame is decoded completely before anything is done for it.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::decode_request_header_from_buffer;

use crate::context::Shared;
use crate::reply::Reply;
use crate::security::{Auth, Gate};

/// A frame the gateway answered: the request's API key and header, and the
/// reply. `Err`: the frame could not be read (the connection is closed).
pub(crate) async fn handle(
    shared: &Shared,
    auth: &mut Auth,
    mut frame: Bytes,
    peer: std::net::SocketAddr,
) -> Result<(ApiKey, RequestHeader, Reply), String> {
    let header = decode_request_header_from_buffer(&mut frame)
        .map_err(|e| format!("unreadable request header: {e}"))?;
    let Ok(key) = ApiKey::try_from(header.request_api_key) else {
        return Err(format!("unknown API key {}", header.request_api_key));
    };
    let reply = match auth.gate(&shared.security, key, &header, frame) {
        Gate::Pass(body) => crate::api::dispatch(shared, key, &header, body, peer).await,
        Gate::Answer(reply) => reply,
    };
    Ok((key, header, reply))
}

/// What the gateway does with one frame, seen from outside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameAnswer {
    /// A response body (after the response header) for this API key.
    Response(ApiKey, BytesMut),
    /// No response (a Produce with acks=0 that succeeded).
    Nothing,
    /// The connection is closed (why), possibly after a response.
    Close(String),
}

/// Answers one frame (the bytes after the 4-byte size prefix) on a fresh
/// connection from `peer`, exactly as the listener does: for fuzzing and
/// tests of the request path without a socket.
pub async fn answer_frame(
    shared: &Shared,
    frame: Bytes,
    peer: std::net::SocketAddr,
) -> FrameAnswer {
    let mut auth = Auth::new(shared.security.sasl.is_some());
    match handle(shared, &mut auth, frame, peer).await {
        Err(why) => FrameAnswer::Close(why),
        Ok((key, _, Reply::Body(body))) => FrameAnswer::Response(key, body),
        Ok((key, _, Reply::Spliced(body))) => match body.to_bytes() {
            Ok(bytes) => FrameAnswer::Response(key, bytes),
            Err(e) => FrameAnswer::Close(format!("reading the records sent: {e}")),
        },
        Ok((_, _, Reply::Nothing)) => FrameAnswer::Nothing,
        Ok((_, _, Reply::Close(why))) | Ok((_, _, Reply::FailedAuthentication(_, why))) => {
            FrameAnswer::Close(why)
        }
    }
}
