//! A handler's answer to one request ([`Reply`]) and the encoding of a
//! response body ([`encode`]): what the listener, the SASL gate and every
//! API handler share, with no dependency on any of them.

use bytes::BytesMut;
use kafka_protocol::protocol::Encodable;

/// What a handler decided to send back.
#[derive(Debug)]
pub(crate) enum Reply {
    /// This response body (after the header).
    Body(BytesMut),
    /// This response body, its records still in segment files
    /// ([`crate::splice`]).
    Spliced(crate::splice::Body),
    /// Nothing (a Produce with acks=0 that succeeded).
    Nothing,
    /// Close the connection (why, for the log).
    Close(String),
    /// A failed authentication: send this body after the SASL failure
    /// delay, then close.
    FailedAuthentication(BytesMut, String),
}

/// Encodes `message` at `version`; an encoding failure closes the connection.
pub(crate) fn encode<M: Encodable>(message: &M, version: i16) -> Reply {
    let mut out = BytesMut::new();
    match message.encode(&mut out, version) {
        Ok(()) => Reply::Body(out),
        Err(e) => Reply::Close(format!("encoding the response: {e}")),
    }
}
