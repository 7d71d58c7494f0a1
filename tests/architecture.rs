//! The crate's shape, checked by reading its sources (issues 31 and 54).
//!
//! - every file of `src/` imports only from its own layer or a lower one
//!   ([`LAYERS`], bottom to top, as docs/architecture.md lists them), and no
//!   import cycle ties two parts of `src/` (a folder or a file) together;
//! - inside `src/app`, each scene is a folder that registers what it adds,
//!   and the shared parts ask instead of knowing: no file of `src/app`
//!   outside `src/app/scenes/<name>/` names a type or the module of that
//!   scene (the scene list, `src/app/scenes/mod.rs`, names each scene's
//!   module once), and no import cycle among `src/app`'s files, other than
//!   inside one scene's folder.
//!
//! An import is a path in the code (comments and strings left out) that
//! resolves to another file's module: `use super::x::Y`, `crate::app::x::f()`,
//! `child::Z` in a file that declares `mod child`. `cargo test --test
//! architecture -- --nocapture` prints the graph it read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One file of `src/` (or `src/app`): its module path (`["scenes", "model"]`), its
/// code without comments and strings, and the modules it declares.
struct File {
    module: Vec<String>,
    code: String,
}

fn app_files() -> BTreeMap<PathBuf, File> {
    files_under("src/app")
}

/// The files of the whole library crate (`src/` but the binary's `main.rs`).
fn crate_files() -> BTreeMap<PathBuf, File> {
    let mut files = files_under("src");
    files.remove(Path::new("main.rs"));
    files.remove(Path::new("lib.rs"));
    files
}

/// The `.rs` files under `dir` (relative to the crate), keyed by their path
/// below it, each with its module path below it.
fn files_under(dir: &str) -> BTreeMap<PathBuf, File> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut paths = Vec::new();
    walk(&root, &mut paths);
    paths
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(&root).unwrap();
            let mut module: Vec<String> = rel
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if module.last().is_some_and(|m| m == "mod") {
                module.pop();
            }
            let code = strip(&std::fs::read_to_string(&path).unwrap());
            (rel.to_path_buf(), File { module, code })
        })
        .collect()
}

/// The code with comments, strings and character literals blanked out, and
/// `#[cfg(test)] mod tests` kept (tests import too).
fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if b[i] == b'r'
            && (b[i..].starts_with(b"r\"") || b[i..].starts_with(b"r#"))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while j < b.len() && b[j] == b'#' {
                hashes += 1;
                j += 1;
            }
            if j < b.len() && b[j] == b'"' {
                let close: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                j += 1;
                while j < b.len() && !b[j..].starts_with(&close) {
                    j += 1;
                }
                i = j + close.len();
                out.push_str("\"\"");
            } else {
                out.push('r');
                i += 1;
            }
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' {
            // A char literal ('a', '\n', '{') or a lifetime ('w).
            let rest = &src[i + 1..];
            let mut chars = rest.char_indices();
            match (chars.next(), chars.next()) {
                (Some((_, '\\')), _) => {
                    let end = rest[1..].find('\'').map_or(rest.len(), |e| e + 2);
                    i += 1 + end;
                    out.push_str("' '");
                }
                (Some(_), Some((n, '\''))) => {
                    i += 1 + n + 1;
                    out.push_str("' '");
                }
                _ => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let c = src[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// Every path in `code` that starts at `crate::app`, `super`, `self` or a
/// declared child module, expanded through `{…}` groups, as segments; a
/// path inside an inline module (`mod tests { use super::*; }`) starts with
/// its `super`s and `self` taken back to the file's own module.
fn paths(code: &str, children: &BTreeSet<String>) -> Vec<Vec<String>> {
    let tokens = tokenize(code);
    let mut out = Vec::new();
    let mut i = 0;
    // Brace depth, and the depths at which inline modules opened.
    let mut depth = 0usize;
    let mut inline: Vec<usize> = Vec::new();
    while i < tokens.len() {
        match tokens[i].as_str() {
            "{" => {
                if i >= 2 && tokens[i - 2] == "mod" {
                    inline.push(depth);
                }
                depth += 1;
            }
            "}" => {
                depth = depth.saturating_sub(1);
                if inline.last() == Some(&depth) {
                    inline.pop();
                }
            }
            _ => {}
        }
        let starts = (tokens[i] == "crate"
            || tokens[i] == "super"
            || tokens[i] == "self"
            || children.contains(&tokens[i]))
            && tokens.get(i + 1).is_some_and(|t| t == "::")
            && (i == 0 || tokens[i - 1] != "::");
        if starts {
            let (found, end) = path_tree(&tokens, i, Vec::new());
            for mut path in found {
                let mut k = inline.len();
                if path[0] == "self" && k > 0 {
                    // The inline module itself: this file.
                    continue;
                }
                while k > 0 && path.first().is_some_and(|s| s == "super") {
                    path.remove(0);
                    k -= 1;
                }
                if path.is_empty() || (k > 0 && path[0] != "crate") {
                    continue;
                }
                if !["crate", "super", "self"].contains(&path[0].as_str()) && inline.len() > k {
                    path.insert(0, "self".into());
                }
                out.push(path);
            }
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

fn tokenize(code: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut chars = code.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_alphanumeric() || c == '_' {
            let mut t = c.to_string();
            while let Some(&d) = chars.peek() {
                if d.is_alphanumeric() || d == '_' {
                    t.push(d);
                    chars.next();
                } else {
                    break;
                }
            }
            tokens.push(t);
        } else if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            tokens.push("::".into());
        } else if !c.is_whitespace() {
            tokens.push(c.to_string());
        }
    }
    tokens
}

/// The paths of a path tree starting at `tokens[i]` (after `prefix`), and
/// the index after it.
fn path_tree(tokens: &[String], mut i: usize, prefix: Vec<String>) -> (Vec<Vec<String>>, usize) {
    let mut path = prefix;
    loop {
        match tokens.get(i).map(String::as_str) {
            Some("{") => {
                let mut out = Vec::new();
                i += 1;
                while i < tokens.len() && tokens[i] != "}" {
                    if tokens[i] == "," {
                        i += 1;
                        continue;
                    }
                    let (found, end) = path_tree(tokens, i, path.clone());
                    out.extend(found);
                    i = end;
                    // Skip `as name` and anything else up to the next item.
                    while i < tokens.len() && tokens[i] != "," && tokens[i] != "}" {
                        i += 1;
                    }
                }
                return (out, i + 1);
            }
            Some(t) if t.chars().all(|c| c.is_alphanumeric() || c == '_') || t == "*" => {
                path.push(t.to_string());
                i += 1;
                if tokens.get(i).is_some_and(|t| t == "::") {
                    i += 1;
                } else {
                    return (vec![path], i);
                }
            }
            _ => return (vec![path], i),
        }
    }
}

/// The file a path from `from` lands in: the deepest module of `files` it
/// names (the file that defines its item).
fn resolve(
    from: &[String],
    path: &[String],
    modules: &BTreeMap<Vec<String>, PathBuf>,
    root: &[&str],
) -> Option<PathBuf> {
    let mut at: Vec<String>;
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            let below = &rest[1..];
            if below.len() < root.len() || below.iter().zip(root).any(|(a, b)| a != b) {
                return None;
            }
            at = Vec::new();
            rest = &below[root.len()..];
        }
        Some("self") => {
            at = from.to_vec();
            rest = &rest[1..];
        }
        Some("super") => {
            at = from.to_vec();
            while rest.first().is_some_and(|s| s == "super") {
                at.pop()?;
                rest = &rest[1..];
            }
        }
        _ => at = from.to_vec(),
    }
    for seg in rest {
        let mut next = at.clone();
        next.push(seg.clone());
        if modules.contains_key(&next) {
            at = next;
        } else {
            break;
        }
    }
    modules.get(&at).cloned()
}

/// The import graph: file → the files it names; `root` is the files' module
/// below `crate` (`["app"]` for `src/app`).
fn graph(files: &BTreeMap<PathBuf, File>, root: &[&str]) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let modules: BTreeMap<Vec<String>, PathBuf> = files
        .iter()
        .map(|(p, f)| (f.module.clone(), p.clone()))
        .collect();
    files
        .iter()
        .map(|(path, file)| {
            let children: BTreeSet<String> = modules
                .keys()
                .filter(|m| m.len() == file.module.len() + 1 && m.starts_with(&file.module))
                .map(|m| m.last().unwrap().clone())
                .collect();
            let to: BTreeSet<PathBuf> = paths(&file.code, &children)
                .iter()
                .filter_map(|p| resolve(&file.module, p, &modules, root))
                .filter(|to| to != path)
                .collect();
            (path.clone(), to)
        })
        .collect()
}

/// The strongly connected components with more than one file (Tarjan's).
fn cycles(graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct Tarjan<'a> {
        graph: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        out: Vec<Vec<PathBuf>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a PathBuf) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in &self.graph[v] {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                loop {
                    let w = self.stack.pop().unwrap();
                    self.on_stack.remove(w);
                    component.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.out.push(component);
                }
            }
        }
    }
    let mut t = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.out
}

/// The scene folder a file belongs to (`scenes/model/…` → `model`).
fn scene_of(path: &Path) -> Option<String> {
    let mut c = path.components();
    (c.next()?.as_os_str() == "scenes").then_some(())?;
    let name = c.next()?.as_os_str().to_string_lossy().into_owned();
    match c.next() {
        Some(_) => Some(name),
        // A scene still in one file (`scenes/model.rs`).
        None => name
            .strip_suffix(".rs")
            .filter(|n| *n != "mod")
            .map(str::to_string),
    }
}

#[test]
fn no_import_cycle_outside_a_scene_folder() {
    let files = app_files();
    let graph = graph(&files, &["app"]);
    let edges: usize = graph.values().map(BTreeSet::len).sum();
    eprintln!(
        "src/app: {} files, {edges} imports between them",
        graph.len()
    );
    for (from, to) in &graph {
        eprintln!(
            "  {} -> {}",
            from.display(),
            to.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let bad: Vec<Vec<PathBuf>> = cycles(&graph)
        .into_iter()
        .filter(|c| {
            let scene = scene_of(&c[0]);
            scene.is_none() || c.iter().any(|p| scene_of(p) != scene)
        })
        .collect();
    for c in &bad {
        eprintln!(
            "cycle of {} files: {}",
            c.len(),
            c.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    assert!(
        bad.is_empty(),
        "{} import cycle(s) among src/app's files (listed above)",
        bad.len()
    );
}

#[test]
fn only_a_scene_names_its_own_types() {
    let files = app_files();
    // Each scene's folder and the types and traits it declares `pub` (what
    // another file could name; its functions are reached through them or
    // through its module, which the path check below catches).
    let mut owned: BTreeMap<String, (String, BTreeSet<String>)> = BTreeMap::new();
    for (path, file) in &files {
        let Some(scene) = scene_of(path) else {
            continue;
        };
        let tokens = tokenize(&file.code);
        let names = &mut owned
            .entry(scene.clone())
            .or_insert_with(|| (scene.clone(), BTreeSet::new()))
            .1;
        for w in tokens.windows(3) {
            if w[0] == "pub" && ["struct", "enum", "trait", "type"].contains(&w[1].as_str()) {
                names.insert(w[2].clone());
            }
        }
    }
    assert!(
        !owned.is_empty(),
        "no scene folders found under src/app/scenes"
    );
    // Names every scene folder declares alike (`ScenePlugin`) are the
    // scene contract, not one scene's type.
    let mut common: Option<BTreeSet<String>> = None;
    for (_, names) in owned.values() {
        common = Some(match common {
            None => names.clone(),
            Some(c) => c.intersection(names).cloned().collect(),
        });
    }
    let common = common.unwrap_or_default();
    let list = Path::new("scenes/mod.rs");
    let mut found = Vec::new();
    for (path, file) in &files {
        let tokens = tokenize(&file.code);
        for (scene, names) in owned.values() {
            if scene_of(path).as_deref() == Some(scene.as_str()) {
                continue;
            }
            for (k, t) in tokens.iter().enumerate() {
                // `scenes::model`, or `model::…` in the scene list.
                let names_module = t == scene
                    && ((k > 1 && tokens[k - 1] == "::" && tokens[k - 2] == "scenes")
                        || (path.starts_with("scenes")
                            && (k == 0 || tokens[k - 1] != "::")
                            && tokens.get(k + 1).is_some_and(|n| n == "::")));
                // A name the file's own scene declares too is its own.
                let its_own = scene_of(path)
                    .and_then(|s| owned.get(&s))
                    .is_some_and(|(_, own)| own.contains(t));
                if (names.contains(t) && !common.contains(t) && !its_own)
                    || (names_module && path != list)
                {
                    found.push(format!(
                        "{} names `{t}` of the {scene} scene",
                        path.display()
                    ));
                }
            }
        }
    }
    found.sort();
    found.dedup();
    assert!(
        found.is_empty(),
        "files outside a scene's folder name its parts:\n{}",
        found.join("\n")
    );
}

/// The crate's layers, lowest first: a file imports only from its own layer
/// or a lower one. A file's layer is that of the longest prefix of its path
/// (below `src/`) listed here; every file must have one.
const LAYERS: &[(&str, &[&str])] = &[
    // Bytes, corpora, batches, the toy tasks' text; files written safely;
    // the words in three languages; charts as SVG.
    ("data and the shared parts", &["data/", "output.rs", "i18n.rs", "chart.rs"]),
    // The configuration, parameters, checkpoints and the gallery's list;
    // one training step as a program of ops.
    ("the model and its program", &["model/", "program/"]),
    // What every backend implements and the requests it answers: the
    // Backend trait, probes, text generation's next-token source,
    // readbacks, the FlashAttention trace's format.
    ("the backend interface", &["backend.rs", "probe.rs", "sample.rs", "readback.rs", "flash/format.rs"]),
    // The CPU reference and the GPU kernels, and choosing between them.
    ("the backends", &["cpu/", "gpu/", "backends.rs"]),
    // The trainer, its schedules, and one step entry by entry.
    ("training", &["train/", "stepthrough.rs"]),
    // What drives a backend to explain it: the flow, interventions,
    // FlashAttention traces, benchmarks, the correctness check.
    ("the analyses", &["flow.rs", "worked.rs", "interventions.rs", "flash/", "bench/", "correctness.rs"]),
    // The gallery's cards and task scores, lessons and handouts.
    ("the catalogue", &["cards.rs", "lesson.rs", "handout.rs"]),
    // A live class: its protocol, its state and log, its server.
    ("the class session", &["class/"]),
    // The front ends.
    ("the command line and the app", &["cli/", "app/", "web_trainer.rs"]),
];

/// The layer of a file (its index in [`LAYERS`]), by the longest prefix.
fn layer_of(path: &Path) -> Option<usize> {
    let path = path.to_string_lossy().replace('\\', "/");
    LAYERS
        .iter()
        .enumerate()
        .flat_map(|(i, (_, prefixes))| prefixes.iter().map(move |p| (i, *p)))
        .filter(|(_, p)| path.starts_with(p))
        .max_by_key(|(_, p)| p.len())
        .map(|(i, _)| i)
}

#[test]
fn every_file_imports_only_its_layer_or_below() {
    let files = crate_files();
    let graph = graph(&files, &[]);
    let edges: usize = graph.values().map(BTreeSet::len).sum();
    eprintln!("src: {} files, {edges} imports between them", graph.len());
    let mut problems = Vec::new();
    for (from, to) in &graph {
        let Some(here) = layer_of(from) else {
            problems.push(format!(
                "{} is in no layer: add its path to LAYERS in tests/architecture.rs",
                from.display()
            ));
            continue;
        };
        for target in to {
            let there = layer_of(target).unwrap_or(usize::MAX);
            if there > here {
                problems.push(format!(
                    "{} ({}) imports {} ({}), a layer above it",
                    from.display(),
                    LAYERS[here].0,
                    target.display(),
                    LAYERS.get(there).map_or("no layer", |l| l.0)
                ));
            }
        }
    }
    for p in &problems {
        eprintln!("{p}");
    }
    assert!(
        problems.is_empty(),
        "{} import(s) break the layers (listed above)",
        problems.len()
    );
    // Inside a layer, folders may lean on each other, but no cycle may tie
    // two top-level parts (a folder or a file of src/) together.
    let part = |p: &Path| p.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
    let crossing: Vec<Vec<PathBuf>> = cycles(&graph)
        .into_iter()
        .filter(|c| c.iter().any(|p| part(p) != part(&c[0])))
        .collect();
    for c in &crossing {
        eprintln!(
            "cycle of {} files: {}",
            c.len(),
            c.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        );
    }
    assert!(
        crossing.is_empty(),
        "{} import cycle(s) between parts of src/ (listed above)",
        crossing.len()
    );
}
