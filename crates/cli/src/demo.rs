//! `sprat demo`: the whole job on a built-in example. Makes a mixed data set, starts a real
//! `sprat serve` process on loopback with a fresh token, pushes the set to it, pulls it back,
//! verifies both copies against the original and prints the reports.

use crate::args::DemoArgs;
use anyhow::{bail, Context};
use rand::{Rng, RngCore, SeedableRng};
use sprat_engine::{Credentials, Fingerprint, TokenKey, Trust};
use sprat_engine::{Endpoint, TransferOptions};
use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Kills the demo's server process when the demo ends, however it ends.
struct ServerProcess(Child);

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn run(a: DemoArgs) -> anyhow::Result<i32> {
    let temp;
    let base = match &a.dir {
        Some(d) => {
            std::fs::create_dir_all(d)
                .with_context(|| format!("cannot create '{}'", d.display()))?;
            d.clone()
        }
        None => {
            temp = tempfile::Builder::new().prefix("sprat-demo-").tempdir()?;
            temp.path().to_path_buf()
        }
    };
    let data = base.join("data");
    let server_root = base.join("server");
    let pulled = base.join("pulled");
    for d in [&data, &server_root, &pulled] {
        if d.exists() {
            bail!(
                "'{}' already exists; give --dir a new directory",
                d.display()
            );
        }
    }
    std::fs::create_dir_all(&server_root)?;
    println!("sprat demo in {}", base.display());
    let (files, bytes) = make_tree(&data, a.files, 0x5eed)?;
    println!(
        "made a data set: {files} files, {:.1} MiB in {}",
        bytes as f64 / 1048576.0,
        data.display()
    );

    let token = hex(&rand::rng().random::<[u8; 16]>());
    let token_file = base.join("token");
    std::fs::write(&token_file, &token)?;
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600))?;
    let exe = std::env::current_exe().context("cannot find the sprat binary")?;
    let child = Command::new(exe)
        .arg("serve")
        .arg("--root")
        .arg(&server_root)
        .args(["--listen", "127.0.0.1:0", "--token-file"])
        .arg(&token_file)
        .arg("--key-file")
        .arg(base.join("server.key"))
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot start sprat serve")?;
    let mut server = ServerProcess(child);
    let stdout = server.0.stdout.take().context("no server stdout")?;
    let mut stdout = BufReader::new(stdout);
    let mut line = String::new();
    stdout.read_line(&mut line)?;
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .with_context(|| format!("unexpected server output '{}'", line.trim()))?
        .to_string();
    line.clear();
    stdout.read_line(&mut line)?;
    let fingerprint = line
        .trim()
        .strip_prefix("fingerprint ")
        .and_then(|f| Fingerprint::parse(f).ok())
        .with_context(|| format!("unexpected server output '{}'", line.trim()))?;
    println!(
        "started sprat serve on {addr} (pid {}), key {fingerprint}\n",
        server.0.id()
    );

    crate::preserve_modes_exactly();
    // The demo knows its server's key from the server itself: pinned, nothing to remember.
    let key = Credentials::new(
        Some(TokenKey::from_token(token.as_bytes())),
        Trust::pinned(fingerprint),
    );
    let options = TransferOptions::default();
    let remote = Endpoint::Remote {
        addr: addr.clone(),
        path: b"demo".to_vec(),
        also: Vec::new(),
    };
    let push = sprat_engine::copy(&Endpoint::Local(data.clone()), &remote, &key, &options)?;
    print!("{push}");
    let pull = sprat_engine::copy(&remote, &Endpoint::Local(pulled.clone()), &key, &options)?;
    print!("{pull}");
    drop(server);

    let mut ok = push.failed == 0 && pull.failed == 0;
    for (what, copy) in [
        ("pushed copy", server_root.join("demo")),
        ("pulled copy", pulled),
    ] {
        match sprat_engine::compare_trees(&data, &copy, true) {
            Ok(s) => println!(
                "verified {what}: {} files, {} directories, {} symlinks, {} identical (content, modes, mtimes, links)",
                s.files,
                s.dirs,
                s.symlinks,
                sprat_engine::report::counted(s.specials, "special file", "special files")
            ),
            Err(diffs) => {
                ok = false;
                for d in diffs {
                    let d = sprat_engine::text::printable(&d.to_string()).into_owned();
                    eprintln!("sprat: demo: {what} differs: {d}");
                }
            }
        }
    }
    if ok {
        println!("demo OK");
        Ok(0)
    } else {
        eprintln!("sprat: error: demo FAILED");
        Ok(1)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Makes a mixed tree: `files` small files (mostly a few KiB, some up to 2 MiB) in nested
/// directories, one 24 MiB file, empty files and directories, symlinks, a FIFO, odd names and
/// modes.
/// Returns the number of regular files and their bytes.
fn make_tree(root: &Path, files: usize, seed: u64) -> anyhow::Result<(u64, u64)> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut count = 0u64;
    let mut bytes = 0u64;
    let mut buf = vec![0u8; 2 << 20];
    rng.fill_bytes(&mut buf);
    let mut write =
        |path: &Path, size: usize, rng: &mut rand::rngs::StdRng| -> anyhow::Result<()> {
            let start = rng.random_range(0..buf.len() - size.min(buf.len()) + 1);
            let mut content = buf[start..start + size.min(buf.len())].to_vec();
            while content.len() < size {
                let more = (size - content.len()).min(buf.len());
                content.extend_from_slice(&buf[..more]);
            }
            std::fs::write(path, &content)
                .with_context(|| format!("cannot write '{}'", path.display()))?;
            count += 1;
            bytes += size as u64;
            Ok(())
        };
    for i in 0..files {
        let dir = root.join(format!("set{:02}/part{:03}", i % 7, i / 100));
        if i % 100 < 7 {
            std::fs::create_dir_all(&dir)?;
        }
        let size = match rng.random_range(0..100) {
            0..75 => rng.random_range(0..16 << 10),
            75..98 => rng.random_range(16 << 10..128 << 10),
            _ => rng.random_range(128 << 10..2 << 20),
        };
        write(&dir.join(format!("file {i:05}.dat")), size, &mut rng)?;
    }
    let odd = root.join("odd names");
    std::fs::create_dir_all(&odd)?;
    write(&root.join("large.bin"), 24 << 20, &mut rng)?;
    write(&odd.join("empty"), 0, &mut rng)?;
    write(&odd.join("line\nbreak"), 100, &mut rng)?;
    write(
        &odd.join(OsStr::from_bytes(b"latin1-\xe9t\xe9")),
        100,
        &mut rng,
    )?;
    let ro = odd.join("read-only.txt");
    write(&ro, 10, &mut rng)?;
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o444))?;
    std::fs::create_dir_all(root.join("empty dir/nested empty"))?;
    std::os::unix::fs::symlink("../large.bin", odd.join("link to large"))?;
    std::os::unix::fs::symlink("/does/not/exist", odd.join("dangling link"))?;
    // A FIFO travels as what it is (never opened, so nothing waits on it).
    rustix::fs::mknodat(
        rustix::fs::CWD,
        odd.join("a fifo"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o640),
        0,
    )?;
    let mut deep = root.join("deep");
    for level in 0..40 {
        deep = deep.join(format!("d{level}"));
    }
    std::fs::create_dir_all(&deep)?;
    write(&deep.join("bottom.txt"), 10, &mut rng)?;
    Ok((count, bytes))
}
