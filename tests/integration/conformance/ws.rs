//! WebSocket, as much of it as the suite's WebSocket test uses: the echo server's `/ws`
//! (upgrade, then every frame sent back) and a client sending one text frame.

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// `Sec-WebSocket-Accept` for a `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    use base64::Engine;
    let digest = ring::digest::digest(
        &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        format!("{key}{GUID}").as_bytes(),
    );
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

/// The echo server's answer to `GET /ws`: without an `Origin` 403 (as the suite's echo
/// server); otherwise the upgrade, after which every frame is sent back.
pub fn upgrade(request: &mut Request<Incoming>) -> Response<Full<Bytes>> {
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let (Some(_origin), Some(key)) = (header("origin"), header("sec-websocket-key")) else {
        return Response::builder()
            .status(403)
            .body(Full::new(Bytes::new()))
            .unwrap_or_default();
    };
    let upgraded = hyper::upgrade::on(request);
    tokio::spawn(async move {
        if let Ok(io) = upgraded.await {
            let _ = echo_frames(TokioIo::new(io)).await;
        }
    });
    Response::builder()
        .status(101)
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-accept", accept_key(&key))
        .body(Full::new(Bytes::new()))
        .unwrap_or_default()
}

/// Reads one frame: (opcode, payload), unmasked.
pub async fn read_frame<S: AsyncRead + Unpin>(s: &mut S) -> std::io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 2];
    s.read_exact(&mut head).await?;
    let opcode = head[0] & 0x0f;
    let masked = head[1] & 0x80 != 0;
    let len = match head[1] & 0x7f {
        126 => {
            let mut b = [0u8; 2];
            s.read_exact(&mut b).await?;
            u64::from(u16::from_be_bytes(b))
        }
        127 => {
            let mut b = [0u8; 8];
            s.read_exact(&mut b).await?;
            u64::from_be_bytes(b)
        }
        n => u64::from(n),
    };
    let mut mask = [0u8; 4];
    if masked {
        s.read_exact(&mut mask).await?;
    }
    let mut payload = vec![0u8; usize::try_from(len).unwrap_or(0).min(1 << 20)];
    s.read_exact(&mut payload).await?;
    if masked {
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= mask[i % 4];
        }
    }
    Ok((opcode, payload))
}

/// Writes one final frame, masked with `mask` when given (a client's).
pub async fn write_frame<S: AsyncWrite + Unpin>(
    s: &mut S,
    opcode: u8,
    payload: &[u8],
    mask: Option<[u8; 4]>,
) -> std::io::Result<()> {
    let mut frame = vec![0x80 | opcode];
    let mask_bit = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => frame.push(mask_bit | u8::try_from(n).unwrap_or(0)),
        n if n <= usize::from(u16::MAX) => {
            frame.push(mask_bit | 126);
            frame.extend_from_slice(&u16::try_from(n).unwrap_or(0).to_be_bytes());
        }
        n => {
            frame.push(mask_bit | 127);
            frame.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    match mask {
        Some(mask) => {
            frame.extend_from_slice(&mask);
            frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        }
        None => frame.extend_from_slice(payload),
    }
    s.write_all(&frame).await
}

async fn echo_frames<S: AsyncRead + AsyncWrite + Unpin>(mut s: S) -> std::io::Result<()> {
    loop {
        let (opcode, payload) = read_frame(&mut s).await?;
        match opcode {
            // Close: answered, then done.
            0x8 => {
                write_frame(&mut s, 0x8, &payload, None).await?;
                return Ok(());
            }
            0x9 => write_frame(&mut s, 0xa, &payload, None).await?,
            _ => write_frame(&mut s, opcode, &payload, None).await?,
        }
    }
}

/// Opens a WebSocket to `addr` with `Host: host` on `path` (with an `Origin`), sends
/// `text`, and returns the text of the frame that comes back.
pub async fn round_trip(
    addr: std::net::SocketAddr,
    host: &str,
    path: &str,
    text: &str,
) -> Result<String, String> {
    let mut tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let key = "dGhlIHNhbXBsZSBub25jZQ==";
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\nOrigin: http://{host}\r\n\r\n"
    );
    tcp.write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    // The answer's head, byte by byte up to the blank line (the frames follow it).
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        let n = tokio::time::timeout(std::time::Duration::from_secs(5), tcp.read(&mut b))
            .await
            .map_err(|_| "no answer to the upgrade".to_string())?
            .map_err(|e| e.to_string())?;
        if n == 0 {
            return Err(format!("closed: {}", String::from_utf8_lossy(&head)));
        }
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    if !head.starts_with("http/1.1 101") {
        return Err(format!("not upgraded: {head}"));
    }
    if !head.contains(&accept_key(key).to_ascii_lowercase()) {
        return Err(format!("wrong Sec-WebSocket-Accept: {head}"));
    }
    write_frame(&mut tcp, 0x1, text.as_bytes(), Some([1, 2, 3, 4]))
        .await
        .map_err(|e| e.to_string())?;
    let (_, payload) =
        tokio::time::timeout(std::time::Duration::from_secs(5), read_frame(&mut tcp))
            .await
            .map_err(|_| "no frame back".to_string())?
            .map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&payload).into_owned())
}
