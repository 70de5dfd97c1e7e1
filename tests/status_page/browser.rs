//! Headless Chromium driven over the DevTools protocol (a WebSocket): open a page, read its
//! rendered text, take a screenshot. `None` (with the reason printed) when Chromium is absent.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

type Socket = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

pub struct Browser {
    child: Child,
    socket: Socket,
    next: u64,
    _profile: std::path::PathBuf,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

impl Browser {
    /// Chromium, headless, on an empty profile, showing `url`.
    pub async fn open(url: &str) -> Option<Browser> {
        let Some(bin) = chromium() else {
            println!("SKIPPED: Chromium is not installed (apt-get install chromium)");
            return None;
        };
        let profile = crate::common::temp_dir("chromium");
        // As root, without the sandbox; without background networking, which this machine's
        // closed network refuses.
        let mut child = Command::new(bin)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--window-size=1000,900",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        let stderr = child.stderr.take()?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if let Some(ws) = line.strip_prefix("DevTools listening on ") {
                    let _ = tx.send(ws.trim().to_owned());
                }
            }
        });
        let browser_ws = rx.recv_timeout(Duration::from_secs(30)).ok()?;
        let port = browser_ws.split(':').nth(2)?.split('/').next()?.to_owned();
        let pages: Value = reqwest::get(format!("http://127.0.0.1:{port}/json/list"))
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        let page = pages.as_array()?.iter().find(|p| p["type"] == "page")?["webSocketDebuggerUrl"]
            .as_str()?
            .to_owned();
        let tcp = tokio::net::TcpStream::connect(format!("127.0.0.1:{port}"))
            .await
            .ok()?;
        let (socket, _) = tokio_tungstenite::client_async(page, tcp).await.ok()?;
        let mut b = Browser {
            child,
            socket,
            next: 0,
            _profile: profile,
        };
        b.call("Page.navigate", json!({ "url": url })).await?;
        Some(b)
    }

    /// One DevTools command: its result (events before it are passed over).
    pub async fn call(&mut self, method: &str, params: Value) -> Option<Value> {
        self.next += 1;
        let id = self.next;
        let msg = json!({"id": id, "method": method, "params": params}).to_string();
        self.socket.send(Message::text(msg)).await.ok()?;
        while let Some(Ok(m)) = self.socket.next().await {
            let Ok(text) = m.to_text() else { continue };
            let v: Value = serde_json::from_str(text).unwrap_or_default();
            if v["id"] == id {
                return Some(v["result"].clone());
            }
        }
        None
    }

    /// The value of a JavaScript expression in the page (null when it fails).
    pub async fn eval(&mut self, expr: &str) -> Value {
        let got = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expr, "returnByValue": true}),
            )
            .await;
        got.map(|r| r["result"]["value"].clone())
            .unwrap_or_default()
    }

    /// The rendered text of the element `selector` (`innerText`, cells split by tabs).
    pub async fn text(&mut self, selector: &str) -> String {
        let expr = format!("(document.querySelector({selector:?}) || {{innerText: ''}}).innerText");
        self.eval(&expr)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Shows the page as a phone does: 390 by 844 CSS pixels, a touch screen.
    pub async fn as_phone(&mut self) -> Option<()> {
        let metrics = json!({"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": true});
        self.call("Emulation.setDeviceMetricsOverride", metrics)
            .await
            .map(drop)
    }

    /// How long until `selector`'s text holds `needle`, asked every 100 ms for at most `within`.
    pub async fn shows(
        &mut self,
        selector: &str,
        needle: &str,
        within: Duration,
    ) -> Option<Duration> {
        self.until(selector, within, |text| text.contains(needle))
            .await
    }

    /// How long until `selector`'s text passes `check`, asked every 100 ms for at most `within`.
    pub async fn until(
        &mut self,
        selector: &str,
        within: Duration,
        check: impl Fn(&str) -> bool,
    ) -> Option<Duration> {
        let start = Instant::now();
        while start.elapsed() <= within {
            if check(&self.text(selector).await) {
                return Some(start.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    }

    /// A PNG of the page as it is.
    pub async fn screenshot(&mut self) -> Option<Vec<u8>> {
        use base64::Engine;
        let r = self
            .call(
                "Page.captureScreenshot",
                json!({"format": "png", "captureBeyondViewport": true}),
            )
            .await?;
        base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str()?)
            .ok()
    }
}
