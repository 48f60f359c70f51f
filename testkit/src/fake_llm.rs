//! A local OpenAI-compatible Chat Completions server for tests: real HTTP/1.1
//! on 127.0.0.1, recording every request, answering from a script of
//! behaviours (failures, delays, refusals, cut-off answers) and otherwise
//! from a deterministic "model" that reads the transcript it was sent.
//!
//! The model is deliberately imperfect in the lossy mode: it paraphrases
//! rules and drops identifiers, as real models do over repeated cycles, so
//! the drift test has something to catch.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How the server answers one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Behavior {
    /// A summary of what was sent, keeping wording and identifiers.
    Faithful,
    /// A summary that paraphrases rules and drops identifiers and half the
    /// details.
    Lossy,
    /// This HTTP status with an error body.
    Status(u16),
    /// A 400 saying the context length was exceeded.
    ContextExceeded,
    /// A cut-off answer (`finish_reason: length`).
    CutOff,
    /// Content that is not JSON.
    NotJson,
    /// A refusal.
    Refuse,
    /// Wait this long, then answer faithfully.
    Delay(Duration),
    /// This answer content, whatever was asked (golden fixtures).
    Fixed(String),
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The JSON body.
    pub body: Value,
}

impl Recorded {
    /// The system and user message contents, joined.
    pub fn prompt_text(&self) -> String {
        self.body["messages"]
            .as_array()
            .map(|ms| {
                ms.iter()
                    .filter_map(|m| m["content"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    }

    /// The user message.
    pub fn user_text(&self) -> String {
        self.body["messages"][1]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

#[derive(Debug)]
struct State {
    script: VecDeque<Behavior>,
    default: Behavior,
    requests: Vec<Recorded>,
}

/// The server; stops when dropped.
#[derive(Debug)]
pub struct FakeLlm {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl FakeLlm {
    /// Starts on 127.0.0.1 (an ephemeral port), answering `default`.
    pub async fn start(default: Behavior) -> std::io::Result<FakeLlm> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State {
            script: VecDeque::new(),
            default,
            requests: Vec::new(),
        }));
        let shared = Arc::clone(&state);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, Arc::clone(&shared)));
            }
        });
        Ok(FakeLlm { addr, state, task })
    }

    /// `http://127.0.0.1:port/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The next requests are answered with these, in order, then the default.
    pub fn script(&self, behaviors: impl IntoIterator<Item = Behavior>) {
        lock(&self.state).script.extend(behaviors);
    }

    /// Changes the default answer.
    pub fn set_default(&self, b: Behavior) {
        lock(&self.state).default = b;
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.state).requests.clone()
    }

    /// How many requests so far.
    pub fn request_count(&self) -> usize {
        lock(&self.state).requests.len()
    }
}

/// Serves one keep-alive connection.
async fn serve(mut stream: TcpStream, state: Arc<Mutex<State>>) {
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let Some((head_len, content_length, auth)) = read_head(&mut stream, &mut buf).await else {
            return;
        };
        while buf.len() < head_len + content_length {
            let mut chunk = [0u8; 16384];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body: Value = serde_json::from_slice(&buf[head_len..head_len + content_length])
            .unwrap_or(Value::Null);
        buf.drain(..head_len + content_length);
        let behavior = {
            let mut s = lock(&state);
            s.requests.push(Recorded {
                authorization: auth,
                body: body.clone(),
            });
            s.script.pop_front().unwrap_or_else(|| s.default.clone())
        };
        let (status, mut reply) = answer(&behavior, &body).await;
        with_usage(&mut reply, &body);
        let text = reply.to_string();
        let head = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            text.len()
        );
        if stream.write_all(head.as_bytes()).await.is_err()
            || stream.write_all(text.as_bytes()).await.is_err()
        {
            return;
        }
    }
}

/// Reads up to the end of the headers: (header bytes, Content-Length, Authorization).
async fn read_head(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> Option<(usize, usize, Option<String>)> {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let mut length = 0;
            let mut auth = None;
            for line in head.lines().skip(1) {
                if let Some((k, v)) = line.split_once(':') {
                    match k.trim().to_ascii_lowercase().as_str() {
                        "content-length" => length = v.trim().parse().unwrap_or(0),
                        "authorization" => auth = Some(v.trim().to_string()),
                        _ => {}
                    }
                }
            }
            return Some((end + 4, length, auth));
        }
        let mut chunk = [0u8; 16384];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// What a real endpoint reports about an answer: the model and token usage
/// (≈4 bytes a token), so telemetry of usage can be checked.
fn with_usage(reply: &mut Value, body: &Value) {
    if reply.get("choices").is_none() {
        return;
    }
    let prompt: usize = body["messages"].as_array().map_or(0, |m| {
        m.iter()
            .map(|m| m["content"].as_str().map_or(0, str::len))
            .sum()
    });
    let answer = reply["choices"][0]["message"]["content"]
        .as_str()
        .map_or(0, str::len);
    reply["model"] = json!(format!(
        "{}-2026-01",
        body["model"].as_str().unwrap_or("fake")
    ));
    reply["usage"] = json!({
        "prompt_tokens": prompt / 4 + 1,
        "completion_tokens": answer / 4 + 1,
        "total_tokens": prompt / 4 + answer / 4 + 2,
    });
}

fn completion(content: Value, finish: &str) -> Value {
    json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}]
    })
}

async fn answer(behavior: &Behavior, body: &Value) -> (u16, Value) {
    let user = body["messages"][1]["content"].as_str().unwrap_or_default();
    match behavior {
        Behavior::Faithful => (
            200,
            completion(json!(summarize(user, false).to_string()), "stop"),
        ),
        Behavior::Lossy => (
            200,
            completion(json!(summarize(user, true).to_string()), "stop"),
        ),
        Behavior::Delay(d) => {
            tokio::time::sleep(*d).await;
            (
                200,
                completion(json!(summarize(user, false).to_string()), "stop"),
            )
        }
        Behavior::Status(code) => (
            *code,
            json!({"error": {"message": "injected failure", "type": "server_error"}}),
        ),
        Behavior::ContextExceeded => (
            400,
            json!({"error": {"message": "This model's maximum context length is 8192 tokens.", "code": "context_length_exceeded"}}),
        ),
        Behavior::CutOff => (
            200,
            completion(json!("{\"facts\": [\"the budget"), "length"),
        ),
        Behavior::Fixed(content) => (200, completion(json!(content), "stop")),
        Behavior::NotJson => (
            200,
            completion(json!("Here is your summary: all good."), "stop"),
        ),
        Behavior::Refuse => (
            200,
            json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": null, "refusal": "I can't help with that."}, "finish_reason": "stop"}]}),
        ),
    }
}

/// The fake model: every line of the earlier summary and of the user's and
/// assistant's messages becomes a fact; lossy mode rewords rules, drops
/// anything with a digit in it, and keeps every other line only.
fn summarize(user_prompt: &str, lossy: bool) -> Value {
    let mut facts: Vec<String> = Vec::new();
    let mut speaker_ok = false;
    for line in user_prompt.lines() {
        let line = line.trim();
        if line.is_empty()
            || line.starts_with("Messages to summarize")
            || line.starts_with("Earlier summary")
            || line.starts_with("The summary, rendered")
        {
            continue;
        }
        if line.starts_with("[turn ") {
            speaker_ok = line.contains("] user:") || line.contains("] assistant:");
            continue;
        }
        if !speaker_ok && !line.starts_with("- ") {
            continue;
        }
        let text = line.trim_start_matches("- ").to_string();
        if text.ends_with(':') || text.starts_with('[') {
            continue;
        }
        facts.push(text);
    }
    if lossy {
        facts = facts
            .into_iter()
            .enumerate()
            .filter(|(i, f)| i % 2 == 0 && !f.chars().any(|c| c.is_ascii_digit()))
            .map(|(_, f)| {
                f.replace("Never", "Try not to")
                    .replace("never", "rarely")
                    .replace("must", "should ideally")
                    .replace("Do not", "Avoid trying to")
            })
            .collect();
    }
    facts.truncate(40);
    json!({
        "facts": facts,
        "decisions": [],
        "open_items": [],
        "current_task": "continue the task",
        "current_plan": [],
        "references": []
    })
}
