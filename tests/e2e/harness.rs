//! Starts a real `svcd` on a free port with a temporary data directory, and talks to it as
//! clients do: over HTTP and through the `svcd` command line.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The `svcd` binary under test.
pub(crate) fn svcd_bin() -> &'static str {
    env!("CARGO_BIN_EXE_svcd")
}

/// A running daemon; killed on drop.
pub(crate) struct Svcd {
    child: Option<Child>,
    /// The data directory (kept for restarts).
    pub(crate) data_dir: PathBuf,
    /// `http://127.0.0.1:<port>/api/svc-nextgen`.
    pub(crate) api: String,
    http: reqwest::blocking::Client,
    _temp: Option<tempfile::TempDir>,
}

/// A response as a user sees it.
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: reqwest::header::HeaderMap,
    pub(crate) body: Vec<u8>,
}

impl Reply {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8(self.body.clone()).expect("UTF-8 body")
    }

    pub(crate) fn lines(&self) -> Vec<String> {
        self.text().lines().map(String::from).collect()
    }

    /// The `detail` of an error body.
    pub(crate) fn detail(&self) -> String {
        self.json()["detail"]
            .as_str()
            .unwrap_or_else(|| panic!("no detail in {}", self.text()))
            .to_string()
    }

    pub(crate) fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    }
}

impl From<reqwest::blocking::Response> for Reply {
    fn from(response: reqwest::blocking::Response) -> Self {
        Reply {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: response.bytes().expect("body").to_vec(),
        }
    }
}

impl Svcd {
    /// Starts a daemon on a fresh data directory.
    pub(crate) fn start() -> Self {
        let temp = tempfile::tempdir().expect("temp dir");
        let mut svcd = Self::start_in(temp.path());
        svcd._temp = Some(temp);
        svcd
    }

    /// Starts a daemon on a fresh data directory with extra environment (`SVCD_*` settings).
    pub(crate) fn start_with(env: &[(&str, &str)]) -> Self {
        let temp = tempfile::tempdir().expect("temp dir");
        let mut svcd = Self::start_in_with(temp.path(), env);
        svcd._temp = Some(temp);
        svcd
    }

    /// Starts a daemon on an existing data directory.
    pub(crate) fn start_in(dir: &Path) -> Self {
        Self::start_in_with(dir, &[])
    }

    fn start_in_with(dir: &Path, env: &[(&str, &str)]) -> Self {
        let address_file = dir.join("svcd.addr");
        let _ = std::fs::remove_file(&address_file);
        std::fs::create_dir_all(dir).unwrap();
        let log = std::fs::File::create(dir.join("svcd.log")).unwrap();
        let child = Command::new(svcd_bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir)
            .env_remove("SVCD_DATA_DIR")
            .env_remove("SVCD_HTTP_LISTEN")
            .env("SVCD_PUBLIC_URL", "")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("svcd starts");
        let mut svcd = Svcd {
            child: Some(child),
            data_dir: dir.to_path_buf(),
            api: String::new(),
            http: reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(120))
                .build()
                .unwrap(),
            _temp: None,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(text) = std::fs::read_to_string(&address_file)
                && text.ends_with('\n')
            {
                svcd.api = format!("http://{}/api/svc-nextgen", text.trim());
                break;
            }
            if let Some(status) = svcd.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("svcd exited with {status}: {}", svcd.log());
            }
            assert!(
                Instant::now() < deadline,
                "svcd did not start: {}",
                svcd.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        svcd
    }

    /// The `host:port` the daemon listens on.
    pub(crate) fn address(&self) -> String {
        let authority = self.api.trim_start_matches("http://");
        authority.split('/').next().unwrap_or(authority).to_string()
    }

    /// The daemon's log so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.data_dir.join("svcd.log")).unwrap_or_default()
    }

    /// GET a path below the API prefix (may include a query string).
    pub(crate) fn get(&self, path: &str) -> Reply {
        self.send("GET", path, None, None)
    }

    /// A request with an optional bearer token and JSON body.
    pub(crate) fn send(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Reply {
        let bearer = token.map(|token| format!("Bearer {token}"));
        let headers: Vec<(&str, &str)> = bearer
            .iter()
            .map(|value| ("Authorization", value.as_str()))
            .collect();
        self.send_with(method, path, &headers, body)
    }

    /// A request with extra headers (given as they are, an `Authorization` too) and an
    /// optional JSON body.
    pub(crate) fn send_with(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Reply {
        let mut request = self.request(method, path);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        Reply::from(request.send().expect("request is answered"))
    }

    /// A request whose `Authorization` header is the given bytes (which need not be text).
    pub(crate) fn send_raw_header(
        &self,
        method: &str,
        path: &str,
        authorization: &[u8],
        body: &Value,
    ) -> Reply {
        let value = reqwest::header::HeaderValue::from_bytes(authorization).unwrap();
        let request = self
            .request(method, path)
            .header(reqwest::header::AUTHORIZATION, value)
            .json(body);
        Reply::from(request.send().expect("request is answered"))
    }

    fn request(&self, method: &str, path: &str) -> reqwest::blocking::RequestBuilder {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        self.http.request(method, format!("{}{path}", self.api))
    }

    /// A GET with extra request headers.
    pub(crate) fn http_get_with(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        self.send_with("GET", path, headers, None)
    }

    /// A POST of a raw (possibly malformed) JSON body.
    pub(crate) fn post_raw(&self, path: &str, body: &str) -> Reply {
        let request = self
            .http
            .post(format!("{}{path}", self.api))
            .header("Content-Type", "application/json")
            .body(body.to_string());
        Reply::from(request.send().expect("request is answered"))
    }

    /// A token from `svcd token issue`.
    pub(crate) fn token(&self, user: &str, admin: bool) -> String {
        let user = format!("--user={user}");
        let mut args = vec!["token", "issue", &user];
        if admin {
            args.push("--admin");
        }
        let output = self.cli(&args);
        assert!(output.status.success(), "{output:?}");
        stdout(&output).trim().to_string()
    }

    /// Runs `svcd ARGS --data-dir <dir>`.
    pub(crate) fn cli(&self, args: &[&str]) -> Output {
        cli_in(&self.data_dir, args, None)
    }

    /// Stops the daemon with SIGTERM and waits for it.
    pub(crate) fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status()
                .unwrap();
            let status = child.wait().unwrap();
            assert!(
                status.success(),
                "svcd did not shut down cleanly: {status}: {}",
                self.log()
            );
        }
    }

    /// Kills the daemon with SIGKILL.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops and starts the daemon on the same data directory.
    pub(crate) fn restart(&mut self) {
        self.stop();
        let temp = self._temp.take();
        *self = Self::start_in(&self.data_dir.clone());
        self._temp = temp;
    }
}

impl Drop for Svcd {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `svcd ARGS --data-dir DIR`, optionally feeding standard input.
pub(crate) fn cli_in(dir: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut command = Command::new(svcd_bin());
    command
        .args(args)
        .arg("--data-dir")
        .arg(dir)
        .env_remove("SVCD_DATA_DIR");
    command.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().expect("svcd runs");
    if let Some(input) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    child.wait_with_output().unwrap()
}

/// Standard output of a command as text.
pub(crate) fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Writes JSON Lines to a file in `dir` and returns its path.
pub(crate) fn write_lines(dir: &Path, name: &str, lines: &[String]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}
