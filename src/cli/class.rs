//! `tinygpt class` (issue 57): teach one lesson live. Serves the web build,
//! the join page and the class's socket from the teacher's laptop, and
//! prints where students go (with a QR code), the code they type and the
//! teacher's own link. Ctrl-C stops serving and keeps the class's file, so
//! the same command resumes the class.

use anyhow::{Context, Result, anyhow};
use std::net::IpAddr;
use std::path::PathBuf;
use tinygpt::class::server::{Class, ClassOptions, start};

#[derive(clap::Args)]
pub struct ClassArgs {
    /// The built-in lesson to teach (`tinygpt app --help` lists them;
    /// default: next-byte). A resumed class keeps its own.
    #[arg(long)]
    lesson: Option<String>,
    /// The port to serve on (0: any free one).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// The address to listen on. The default, 127.0.0.1, admits only this
    /// machine; `--bind 0.0.0.0` lets the classroom's network in.
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// The class's file: who joined, the answers, the step. An existing
    /// class file is resumed; ending the class deletes it.
    #[arg(long, default_value = "tinygpt-class.jsonl")]
    session: PathBuf,
    /// The web build to serve (made by `bash web/build.sh`).
    #[arg(long, default_value = "web/dist")]
    web: PathBuf,
    /// Serve https (and wss) with this certificate and its private key,
    /// both PEM files, so that students' browsers give the page WebGPU
    /// (docs/guide/class.md says how to make a self-signed one).
    #[arg(long, num_args = 2, value_names = ["CERT", "KEY"])]
    tls: Option<Vec<PathBuf>>,
}

pub fn run(args: ClassArgs) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the class server's runtime")?;
    runtime.block_on(async {
        let options = ClassOptions {
            bind: args.bind,
            port: args.port,
            session: args.session.clone(),
            lesson: args.lesson.clone(),
            web: args.web.clone(),
            tls: args.tls.as_deref().map(|pair| (pair[0].clone(), pair[1].clone())),
        };
        let (class, serve) = start(options).await.map_err(|e| anyhow!(e))?;
        print_banner(&class, args.bind, &args.web);
        tokio::select! {
            served = serve => served.context("the class server stopped")?,
            _ = ctrl_c() => {
                println!(
                    "\nStopped. The class is kept in {}: run the same command to resume it.",
                    class.session.display()
                );
            }
        }
        Ok(())
    })
}

async fn ctrl_c() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let tx = std::sync::Mutex::new(Some(tx));
    // The process's own Ctrl-C handler (ctrlc), shared with the trainer's.
    let _ = ctrlc::set_handler(move || {
        if let Some(tx) = tx.lock().ok().and_then(|mut t| t.take()) {
            let _ = tx.send(());
        }
    });
    let _ = rx.await;
}

/// The address students on the network can reach: this machine's address
/// on its default route when listening on every interface.
fn reachable_host(bind: IpAddr) -> String {
    if !bind.is_unspecified() {
        return bind.to_string();
    }
    // A UDP "connection" sends nothing; it only picks the outgoing address.
    std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("192.0.2.1:9").map(|_| s))
        .and_then(|s| s.local_addr())
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|_| "this-machine's-address".to_string())
}

fn print_banner(class: &Class, bind: IpAddr, web: &std::path::Path) {
    let host = reachable_host(bind);
    let port = class.addr.port();
    let scheme = class.scheme();
    let join = format!("{scheme}://{host}:{port}/join");
    let teacher = format!("{scheme}://127.0.0.1:{port}/#class={}&teacher={}", class.code, class.token);
    println!(
        "TinyGPT class: {} ({} steps, lesson `{}`)",
        class.lesson.title,
        class.lesson.steps.len(),
        class.lesson.name
    );
    if let Some((students, answers, step)) = class.resumed {
        println!(
            "Resumed from {}: {students} students, {answers} answers, at step {}.",
            class.session.display(),
            step + 1
        );
    }
    println!();
    println!("  Students open   {join}");
    println!("  and type        {}", tinygpt::class::protocol::spaced_code(&class.code));
    println!();
    if let Ok(qr) = qrcode::QrCode::new(format!("{join}?code={}", class.code)) {
        let picture = qr
            .render::<qrcode::render::unicode::Dense1x2>()
            .dark_color(qrcode::render::unicode::Dense1x2::Light)
            .light_color(qrcode::render::unicode::Dense1x2::Dark)
            .quiet_zone(true)
            .build();
        for line in picture.lines() {
            println!("  {line}");
        }
        println!();
    }
    println!("  Your link, the teacher's (keep it to yourself):");
    println!("    {teacher}");
    if !class.https {
        println!("  or natively:  tinygpt app --join '{teacher}'");
    }
    println!();
    if bind.is_loopback() {
        println!(
            "Only this machine can join: start with --bind 0.0.0.0 to let the classroom's network in."
        );
    }
    if class.https {
        println!(
            "Served over https: with a self-signed certificate each browser warns once (Advanced → Proceed), then the page has WebGPU (docs/guide/class.md)."
        );
    } else if !bind.is_loopback() {
        println!(
            "Over plain http, students' browsers give the page no WebGPU: it trains on their CPU; --tls CERT KEY serves https (docs/guide/class.md)."
        );
    }
    if !class.web_found {
        println!(
            "The web build is not in {}: students' browsers cannot load the app until `bash web/build.sh` makes it.",
            web.display()
        );
    }
    println!(
        "The class is kept in {} (Ctrl-C stops; the same command resumes; End class deletes it).",
        class.session.display()
    );
}
