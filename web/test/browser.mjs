// The browser test of the web build (run by .ci/run under Xvfb):
// serves web/dist on localhost, opens it in Debian's Chromium (driven by
// playwright-core), and checks three runs:
//
// 1. WebGPU (SwiftShader's, headed: headless Chromium loses a SwiftShader
//    WebGPU device once a canvas is presented): the app trains STEPS steps
//    on the GPU backend with finite losses, writes its view to the URL
//    fragment, and draws a frame that is not blank.
//    Then sampling (the Generate button), and files through the browser: a corpus dropped on the page, a
//    checkpoint saved as a download and loaded back through the file input.
// 2. WebGPU turned off: the page draws through WebGL2, the app trains on the
//    CPU backend and shows the notice that says why.
// 3. The scenes that compute in the page: the plain address opens the 3D
//    walk-through (Inside the model) on the shipped trained model, its pass
//    computed in the page; a `scene=path` link computes One byte's flow there; a
//    `lesson=which-heads&step=2` link computes a Take-it-apart tool there;
//    CPU vs GPU compares one step on
//    the page's CPU and WebGPU; a `lesson=why-flash&step=2` link opens that
//    lesson's step on the shipped small checkpoint (step 1500) in the Flash
//    scene with its narration; a `model=reverse` link fetches that gallery
//    model (not in the wasm) and opens it; a `bench=tiny` link measures
//    tiny on the page's CPU and its WebGPU in the Speedup scene, and a
//    `lesson=why-gpus-win&step=4` link times one step of small per kernel
//    (WebGPU timestamps), frames drawn all the while (the longest gaps
//    between frames and the page's thread's longest hold bounded); a
//    workshop link (`locked=1`) shows its
//    lesson and hides the scene switcher, the panels and "end lesson";
//    the same lesson linked with `lang=zh` fetches the CJK font and opens
//    in Chinese, and with `lang=es` in Spanish, fetching no font.
// 4. Offline: after a first visit the network is cut and the page reloaded;
//    it opens the gallery model its link names (from the page's cache), a
//    fresh run trains, and no request reaches the server (the service
//    worker and the page's caches).
// 5. A lost GPU: the page's WebGPU devices destroyed under a training run;
//    the run goes on on the CPU from its last host copy and the page draws
//    on.
// 6. A live class: a teacher and three students, their pages following
//    the teacher's steps and the answers counted and revealed (classRun).
// 7. The CPU fallback's threads (issue 55; threadsRun): without WebGPU,
//    tiny and small train on the page's own thread where the page is not
//    cross-origin isolated, and in the threaded trainer worker on 1 and 2
//    threads where it is (a second server sends COOP and COEP). Each
//    prints its median ms per step (the step's own time, as the app
//    measures it) and steps per second; the ratios are reported, not
//    asserted (speed is measured, never asserted).
//
// Any console error or uncaught exception fails a run (in the fifth, the
// device's loss is logged as an error: there a panic or an exception does). Prints one JSON line
// per run (times to first frame and first step, steps per second) and saves
// the screenshots in web/test/out/.

import { chromium } from "playwright-core";
import http from "node:http";
import fs from "node:fs";
import path from "node:path";
import zlib from "node:zlib";
import { fileURLToPath } from "node:url";
import os from "node:os";
import { spawn } from "node:child_process";

const here = path.dirname(fileURLToPath(import.meta.url));
const dist = path.resolve(here, "..", "dist");
const outDir = path.join(here, "out");
const STEPS = Number(process.env.TINYGPT_WEB_STEPS || 20);
const TIMEOUT_S = Number(process.env.TINYGPT_WEB_TIMEOUT_S || 300);
// How long a screenshot may wait for the page's next frame (Playwright's
// default is 30 s, which a page training on SwiftShader missed once on a
// contended CI machine: stop 71's run); the time each took is printed.
const SCREENSHOT_TIMEOUT_MS = Number(process.env.TINYGPT_WEB_SCREENSHOT_TIMEOUT_MS || 90000);

// Every screenshot of the test: the long timeout, and a second try when the
// first timed out (a frame late under load is not what the test checks).
async function shoot(page, options) {
  try {
    return await page.screenshot({ ...options, timeout: SCREENSHOT_TIMEOUT_MS });
  } catch (e) {
    if (e.name !== "TimeoutError") throw e;
    console.error(`screenshot ${options.path}: no frame in ${SCREENSHOT_TIMEOUT_MS} ms, trying once more`);
    return await page.screenshot({ ...options, timeout: SCREENSHOT_TIMEOUT_MS });
  }
}
const chromiumPath = process.env.CHROMIUM || "/usr/bin/chromium";

const common = [
  "--no-sandbox",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--no-first-run",
  "--disable-gpu-watchdog",
];
const runs = [
  {
    name: "webgpu",
    fragment: "preset=tiny&seed=1337&scene=model&view=weights&backend=gpu&train=1",
    args: [
      "--enable-unsafe-webgpu",
      "--enable-features=Vulkan",
      "--use-vulkan=swiftshader",
      "--use-webgpu-adapter=swiftshader",
    ],
    webgpu: true,
    backend: "gpu",
    files: true,
  },
  {
    name: "no-webgpu",
    fragment: "preset=tiny&seed=1337&train=1",
    args: ["--disable-features=WebGPU", "--use-angle=swiftshader", "--enable-unsafe-swiftshader"],
    webgpu: false,
    backend: "cpu",
  },
  {
    // A phone over the class's plain http: no WebGPU, WebGL2, 2.625 device
    // pixels a CSS pixel. Bevy's first window (1280×720) was 2560×1440
    // device pixels there, over WebGL2's 2048, and the page panicked on its
    // first frame ("Surface is not configured for presentation") until the
    // window started at the page's size with the adapter's texture limit.
    name: "hidpi-webgl2",
    fragment: "preset=tiny&seed=1337&train=1",
    args: ["--disable-features=WebGPU", "--use-angle=swiftshader", "--enable-unsafe-swiftshader"],
    viewport: { width: 412, height: 860 },
    dpr: 2.625,
    steps: 3,
    webgpu: false,
    backend: "cpu",
  },
];

const types = {
  ".html": "text/html", ".js": "text/javascript", ".wasm": "application/wasm",
  ".webmanifest": "application/manifest+json", ".svg": "image/svg+xml", ".png": "image/png",
};
// While `down`, the server answers nothing (it drops the connection, as a
// lost network does) and notes what was asked: the offline run (playwright's
// offline mode does not reach a service worker's own fetches).
let down = false;
const askedWhileDown = [];

// Every path the server answered, in order (which files a page fetched).
const served = [];
function serve({ isolated = false } = {}) {
  const server = http.createServer((req, res) => {
    if (down) {
      askedWhileDown.push(req.url);
      req.socket.destroy();
      return;
    }
    const url = new URL(req.url, "http://localhost");
    served.push(url.pathname);
    if (url.pathname === "/__blank.html") {
      // An empty page of this origin (threadsRun's bench: no app drawing).
      res.writeHead(200, { "Content-Type": "text/html",
        ...(isolated ? { "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp" } : {}) });
      res.end("<!doctype html><title>bench</title>");
      return;
    }
    const file = path.join(dist, url.pathname === "/" ? "index.html" : decodeURIComponent(url.pathname));
    if (!file.startsWith(dist) || !fs.existsSync(file) || fs.statSync(file).isDirectory()) {
      res.writeHead(404);
      res.end("not found");
      return;
    }
    const body = fs.readFileSync(file);
    res.writeHead(200, {
      "Content-Type": types[path.extname(file)] || "application/octet-stream",
      "Content-Length": body.length,
      // A cross-origin isolated page (threadsRun): wasm threads need it.
      ...(isolated ? { "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp" } : {}),
    });
    res.end(body);
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

// A PNG's pixels (8-bit RGB or RGBA, not interlaced: what Chromium writes).
function decodePng(buf) {
  let pos = 8;
  let width = 0, height = 0, channels = 0;
  const idat = [];
  while (pos < buf.length) {
    const len = buf.readUInt32BE(pos);
    const type = buf.toString("ascii", pos + 4, pos + 8);
    const data = buf.subarray(pos + 8, pos + 8 + len);
    if (type === "IHDR") {
      width = data.readUInt32BE(0);
      height = data.readUInt32BE(4);
      if (data[8] !== 8 || data[12] !== 0) throw new Error("unexpected PNG depth or interlace");
      channels = { 2: 3, 6: 4 }[data[9]];
      if (!channels) throw new Error(`unexpected PNG colour type ${data[9]}`);
    } else if (type === "IDAT") idat.push(data);
    pos += 12 + len;
  }
  const raw = zlib.inflateSync(Buffer.concat(idat));
  const stride = width * channels;
  const px = Buffer.alloc(height * stride);
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)];
    const line = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    for (let x = 0; x < stride; x++) {
      const a = x >= channels ? px[y * stride + x - channels] : 0;
      const b = y > 0 ? px[(y - 1) * stride + x] : 0;
      const c = x >= channels && y > 0 ? px[(y - 1) * stride + x - channels] : 0;
      let v = line[x];
      if (filter === 1) v += a;
      else if (filter === 2) v += b;
      else if (filter === 3) v += (a + b) >> 1;
      else if (filter === 4) {
        const p = a + b - c, pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c);
        v += pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      px[y * stride + x] = v & 255;
    }
  }
  return { width, height, channels, px };
}

// How much of the picture is not its most common colour, and how many
// colours it has.
function pictureStats(png) {
  const { width, height, channels, px } = decodePng(png);
  const counts = new Map();
  for (let i = 0; i < width * height; i++) {
    const o = i * channels;
    const key = (px[o] << 16) | (px[o + 1] << 8) | px[o + 2];
    counts.set(key, (counts.get(key) || 0) + 1);
  }
  const top = Math.max(...counts.values());
  return { width, height, colours: counts.size, nonBackground: 1 - top / (width * height) };
}

// The status once `ready(status)` holds, or null after `seconds`.
async function waitFor(page, ready, seconds) {
  const t0 = Date.now();
  while (Date.now() - t0 < seconds * 1000) {
    const status = await page.evaluate(() => ({ ...window.tinygptStatus }));
    if (ready(status)) return status;
    await page.waitForTimeout(250);
  }
  return null;
}

// Clicks the app's control named `name` where the page's mirror of the
// accessibility tree (src/app/access/tree.rs) says it is drawn: no
// coordinates that move when the layout does.
async function clickNamed(page, name, seconds = 60) {
  const found = await waitFor(page, (s) => (s.access?.nodes || []).some((n) => n.name === name && n.rect), seconds);
  if (!found) throw new Error(`no control named ${JSON.stringify(name)} in the accessibility tree`);
  const node = found.access.nodes.find((n) => n.name === name && n.rect);
  const [x0, y0, x1, y1] = node.rect;
  await page.mouse.click((x0 + x1) / 2, (y0 + y1) / 2);
}

// A safetensors file's header (JSON) from its bytes.
function safetensorsHeader(bytes) {
  const n = Number(bytes.readBigUInt64LE(0));
  return JSON.parse(bytes.subarray(8, 8 + n).toString("utf8"));
}

// Files through the browser: a corpus dropped on the page, a checkpoint
// saved as a download (the left panel's button, found by its name in the
// accessibility tree), and that checkpoint loaded back through the file
// input.
async function filesInAndOut(page, before) {
  const problems = [];
  // Save: the "Download checkpoint" button (first: a dropped corpus changes
  // the panel's layout).
  const download = page.waitForEvent("download", { timeout: 180000 });
  await clickNamed(page, "Download checkpoint");
  let ckpt;
  try {
    const d = await download;
    ckpt = fs.readFileSync(await d.path());
    const header = safetensorsHeader(ckpt);
    const step = Number(header.__metadata__?.step);
    console.log(JSON.stringify({ download: d.suggestedFilename(), bytes: ckpt.length, step }));
    if (!(step >= before.step)) problems.push(`the downloaded checkpoint is at step ${step}, before ${before.step}`);
    for (const name of ["transformer.wte.weight", "adam.m.transformer.wte.weight", "adam.v.transformer.wte.weight"]) {
      if (!header[name]) problems.push(`the downloaded checkpoint lacks ${name}`);
    }
    if (problems.length) return problems;
    // Drop a corpus (a DataTransfer with one File, as a drag from the desktop).
    const corpus = "To be, or not to be, that is the question.\n".repeat(200);
    await page.evaluate((text) => {
      const data = new DataTransfer();
      data.items.add(new File([text], "dropped.txt", { type: "text/plain" }));
      window.dispatchEvent(new DragEvent("drop", { dataTransfer: data, bubbles: true, cancelable: true }));
    }, corpus);
    if (!(await waitFor(page, (s) => /dropped\.txt is loaded/.test(s.info || ""), 60))) {
      problems.push("the dropped corpus was not taken (no 'dropped.txt is loaded' message)");
    }
    // Load the checkpoint back through the file input: the run resumes at
    // its step, on the dropped corpus.
    await page.setInputFiles("#file", { name: d.suggestedFilename(), mimeType: "application/octet-stream", buffer: ckpt });
    const resumed = await waitFor(page, (s) => /resumed at step/.test(s.info || ""), 120);
    if (!resumed) problems.push("the checkpoint loaded through the file input did not resume the run");
    else if (!resumed.info.includes(`step ${step} `)) problems.push(`resumed at the wrong step: ${resumed.info}`);
    else if (resumed.corpus !== "dropped.txt") problems.push(`the resumed run trains on ${resumed.corpus}, not the dropped corpus`);
    else if (!d.suggestedFilename().includes(`step${step}.`)) problems.push(`the download's name ${d.suggestedFilename()} is not after its step ${step}`);
  } catch (e) {
    problems.push(`no checkpoint download: ${e.message}`);
  }
  return problems;
}

// Debian's Chromium, headed, with the common flags and `args`.
function launch(args) {
  return chromium.launch({ executablePath: chromiumPath, headless: false, args: [...common, ...args] });
}

async function runOnce(base, run) {
  const browser = await launch(run.args);
  const problems = [];
  try {
    const page = await browser.newPage({ viewport: run.viewport || { width: 1280, height: 720 }, deviceScaleFactor: run.dpr || 1 });
    page.on("console", (msg) => {
      if (msg.type() === "error") problems.push(`console error: ${msg.text()}`);
    });
    page.on("pageerror", (e) => problems.push(`uncaught: ${e.message}`));
    const steps = run.steps || STEPS;
    const t0 = Date.now();
    await page.goto(`${base}/#${run.fragment}`);
    let status = null;
    for (;;) {
      status = await page.evaluate(() => ({ ...window.tinygptStatus, webgpu: window.tinygptHost.webgpu }));
      const done = status.step >= steps && status.backend === run.backend;
      if (done || problems.length || Date.now() - t0 > TIMEOUT_S * 1000) break;
      await page.waitForTimeout(500);
    }
    const fragment = await page.evaluate(() => location.hash);
    fs.mkdirSync(outDir, { recursive: true });
    const shotPath = path.join(outDir, `${run.name}.png`);
    const shot = await shoot(page, { path: shotPath });
    const picture = pictureStats(shot);
    const times = status.stepTimes || [];
    const first = times.find(([, step]) => step >= 1);
    const last = times[times.length - 1];
    const stepsPerS = first && last && last[0] > first[0] ? (last[1] - first[1]) / ((last[0] - first[0]) / 1e3) : null;
    const result = {
      run: run.name,
      webgpu_adapter: status.webgpu,
      backend: status.backend,
      backend_label: status.backend_label,
      steps: status.step,
      loss: status.loss,
      loss_finite: status.loss_finite,
      timelapse_frames: status.timelapse_frames,
      first_frame_ms: status.firstFrameMs,
      first_step_ms: status.firstStepMs,
      steps_per_s: stepsPerS,
      notice: status.notice,
      errors: status.errors,
      fragment,
      screenshot: { path: path.relative(process.cwd(), shotPath), ...picture },
    };
    console.log(JSON.stringify(result));

    const check = (ok, what) => { if (!ok) problems.push(what); };
    check(status.webgpu === run.webgpu, `the page's WebGPU probe said ${status.webgpu}, expected ${run.webgpu}`);
    check(status.backend === run.backend, `trained on ${status.backend}, expected ${run.backend}`);
    check(status.step >= steps, `only ${status.step} of ${steps} steps in ${TIMEOUT_S} s`);
    check(status.loss_finite === true && Number.isFinite(status.loss), `the last loss is not finite: ${status.loss}`);
    check((status.errors || []).length === 0, `the app reported errors: ${JSON.stringify(status.errors)}`);
    // Every run records its time-lapse, on WebGPU too (frames at steps
    // spaced in log(step): every one of the first few).
    check(status.timelapse_frames >= 3, `the run recorded ${status.timelapse_frames} time-lapse frames in ${status.step} steps`);
    check(fragment.includes("preset=tiny") && fragment.includes("seed=1337") && fragment.includes("scene=model"),
      `the URL fragment does not hold the view: ${fragment}`);
    check(picture.colours > 100 && picture.nonBackground > 0.2,
      `the screenshot looks blank: ${picture.colours} colours, ${(picture.nonBackground * 100).toFixed(1)}% off the background`);
    if (!run.webgpu) {
      check(/WebGPU/.test(status.notice || ""), `no notice says why the CPU trains: ${status.notice}`);
    }
    if (run.files && problems.length === 0) {
      // Sampling: the right panel's Generate button; text streams in from
      // the weights of the moment.
      await clickNamed(page, "Generate");
      const sampled = await waitFor(page, (s) => (s.sample?.text || "").length >= 100 && s.sample.from_step >= 1, 120);
      if (!sampled) problems.push("Generate gave no text from the trained weights");
      else console.log(JSON.stringify({ sample: sampled.sample }));
      for (const p of await filesInAndOut(page, status)) problems.push(p);
    }
  } finally {
    await browser.close();
  }
  return problems;
}

// The scenes that compute in the page (WebGPU on SwiftShader): the
// correctness scene compares one step on the page's CPU and its WebGPU for
// every tensor; a link with bench=tiny measures both backends in the
// page's one thread and the curve's table fills; the kernel view times a
// step; lessons, workshops, languages, the gallery, the flow and a probe.
async function scenesRun(base) {
  const browser = await launch(runs[0].args);
  const problems = [];
  try {
    for (const [scene, fragment, ready, check, options] of [
      [
        "correctness",
        "preset=tiny&seed=1337&scene=correctness",
        (s) => ["done", "failed"].includes(s.correctness?.state),
        (s) => {
          if (s.correctness?.state !== "done") return `the comparison did not finish: ${JSON.stringify(s.correctness)}`;
          if (!(s.correctness.tensors > 0)) return `no tensors compared: ${JSON.stringify(s.correctness)}`;
          if (!(s.correctness.max_rel < 1e-2)) return `CPU and WebGPU differ: ${JSON.stringify(s.correctness)}`;
          return null;
        },
      ],
      [
        "lesson",
        "lesson=why-flash&step=2",
        (s) => s.lesson?.narration_drawn && s.scene === "flash" && s.step >= 1500,
        (s) => {
          if (s.lesson?.name !== "why-flash" || s.lesson?.step !== 2) return `the link's lesson step is not on screen: ${JSON.stringify(s.lesson)}`;
          return null;
        },
      ],
      [
        // A workshop link: the lesson and nothing else.
        "workshop",
        "lesson=attention&step=2&locked=1",
        // Its map computed (the shipped small's weights at step 1500).
        (s) => s.lesson?.narration_drawn && s.ui && s.attention?.step >= 1500,
        (s) => {
          if (s.lesson?.name !== "attention" || s.lesson?.step !== 2) return `the workshop's lesson is not on screen: ${JSON.stringify(s.lesson)}`;
          const ui = s.ui;
          if (!ui.locked || ui.scene_tabs || ui.run_panel || ui.charts || ui.end_lesson) return `a locked link shows more than its lesson: ${JSON.stringify(ui)}`;
          return null;
        },
      ],
      [
        // A gallery model not in the wasm: the page fetches its weights
        // (assets/gallery/reverse.safetensors, copied by build.sh) and the
        // app opens it, at its 3000 steps, in the Attention scene.
        "gallery",
        "model=reverse&scene=attention",
        (s) => s.scene === "attention" && (s.step >= 3000 || s.errors?.length),
        (s) => {
          if (s.errors?.length) return `the gallery model did not open: ${JSON.stringify(s.errors)}`;
          if (s.step !== 3000) return `the page is not on the reversal model (step ${s.step})`;
          return null;
        },
      ],
      [
        // A workshop link in Chinese: the page fetches the CJK font (only
        // now: it is not in the wasm), and the app switches once it is in.
        "chinese",
        "lesson=one-byte&step=3&locked=1&lang=zh",
        (s) => s.language === "zh" && s.lesson?.narration_drawn && (s.path?.nodes > 0 || s.path?.error),
        (s, asked) => {
          if (s.lesson?.name !== "one-byte" || s.lesson?.step !== 3) return `the lesson is not on screen: ${JSON.stringify(s.lesson)}`;
          if (s.path?.error) return `the flow could not be computed: ${s.path.error}`;
          if (!asked.some((p) => p.endsWith("/fonts/NotoSansCJKsc-subset.otf"))) return `the CJK font was not fetched: ${JSON.stringify(asked)}`;
          return null;
        },
      ],
      [
        // The same in Spanish: its letters are in the label font, so the
        // page fetches no other font.
        "spanish",
        "lesson=one-byte&step=3&locked=1&lang=es",
        (s) => s.language === "es" && s.lesson?.narration_drawn && (s.path?.nodes > 0 || s.path?.error),
        (s, asked) => {
          if (s.path?.error) return `the flow could not be computed: ${s.path.error}`;
          if (asked.some((p) => p.includes("/fonts/"))) return `a Spanish page fetched a font: ${JSON.stringify(asked)}`;
          return null;
        },
      ],
      [
        "path",
        "scene=path",
        (s) => s.scene === "path" && (s.path?.nodes > 0 || s.path?.error),
        (s) => {
          if (s.path.error) return `the flow could not be computed: ${s.path.error}`;
          // The page's questions go to its CPU (src/app/worker.rs).
          if (s.path.device !== "cpu") return `the flow does not say it was computed on the page's CPU: ${JSON.stringify(s.path)}`;
          return null;
        },
      ],
      [
        // The plain address: the 3D walk-through of the shipped trained
        // model, its pass computed on the page's CPU, the tour's beats laid
        // out and its tensors drawn. The page fetches the model, so the
        // walk may lay out the untrained one first: ready once the trained
        // one is in (or the walk failed; TIMEOUT_S if it never comes).
        "walk",
        "",
        (s) => s.scene === "flow" && ((s.walk?.beats > 0 && s.step >= 1000) || s.walk?.error),
        (s) => {
          if (s.walk.error) return `the walk-through could not be computed: ${s.walk.error}`;
          if (s.walk.device !== "cpu") return `the walk-through does not say it was computed on the page's CPU: ${JSON.stringify(s.walk)}`;
          if (!(s.step >= 1000)) return `the plain address did not open the shipped trained model: step ${s.step}`;
          return null;
        },
      ],
      [
        "probe",
        "lesson=which-heads&step=2",
        (s) => s.scene === "probe" && (s.probe?.tool || s.probe?.error),
        (s) => {
          if (s.probe.error) return `the tool could not be computed: ${s.probe.error}`;
          if (s.probe.tool !== s.probe.showing) return `the tool on screen has no numbers: ${JSON.stringify(s.probe)}`;
          return null;
        },
      ],
      [
        // The bench in the page: both backends measured on the page's one
        // thread, and the page drawing all the while (frame gaps).
        "speedup",
        "preset=tiny&seed=1337&scene=speedup&bench=tiny",
        (s) => s.speedup && !s.speedup.running && (s.speedup.results.length >= 2 || s.speedup.message),
        (s) => {
          const of = (kind) => (s.speedup?.results || []).find((r) => r.preset === "tiny" && r.backend === kind);
          const cpu = of("cpu"), gpu = of("gpu");
          if (!cpu || !(cpu.median_ms > 0 && cpu.steps >= 5)) return `no CPU measurement of tiny: ${JSON.stringify(s.speedup)}`;
          if (!gpu || !(gpu.median_ms > 0 && gpu.steps >= 5)) return `no WebGPU measurement of tiny: ${JSON.stringify(s.speedup)}`;
          if (!gpu.timing) return `the GPU's measurement does not say how it was timed: ${JSON.stringify(gpu)}`;
          if (!(Math.abs(gpu.gpu_over_cpu - cpu.median_ms / gpu.median_ms) < 1e-9 * Math.max(1, gpu.gpu_over_cpu))) return `the ratio is not CPU over GPU: ${JSON.stringify(s.speedup)}`;
          return null;
        },
        { gaps: "cpu-first" },
      ],
      [
        // The kernel view in the page: one step of small timed per
        // dispatch by WebGPU timestamps read back without waiting (or the
        // CPU's op times, saying why, where the browser grants none).
        "kernels",
        "lesson=why-gpus-win&step=4",
        (s) => s.speedup?.kernels && !s.speedup.running,
        (s) => {
          const k = s.speedup.kernels;
          if (k.error) return `the kernels were not timed: ${k.error}`;
          if (k.preset !== "small" || !(k.dispatches > 0 && k.total_ms > 0)) return `no step of small timed: ${JSON.stringify(k)}`;
          if (k.source !== "gpu_timestamps" && !k.note) return `the CPU's op times stand in without saying why: ${JSON.stringify(k)}`;
          return null;
        },
        { gaps: "report" },
      ],
    ]) {
      if (onlyScenes.length && !onlyScenes.includes(scene)) continue;
      const page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
      page.on("pageerror", (e) => problems.push(`${scene}: uncaught: ${e.message}`));
      if (options?.gaps) await page.addInitScript(recordFrames);
      const servedBefore = served.length;
      await page.goto(`${base}/#${fragment}`);
      const status = await waitFor(page, ready, TIMEOUT_S);
      // A frame or two for what just came back to be drawn.
      await page.waitForTimeout(500);
      const shotPath = path.join(outDir, `scene-${scene}.png`);
      fs.mkdirSync(outDir, { recursive: true });
      const shotStart = Date.now();
      const picture = pictureStats(await shoot(page, { path: shotPath }));
      picture.ms = Date.now() - shotStart;
      console.log(JSON.stringify({ scene, status: status && { scene: status.scene, step: status.step, language: status.language, lesson: status.lesson, speedup: status.speedup, correctness: status.correctness, path: status.path, walk: status.walk, probe: status.probe, errors: status.errors }, screenshot: picture }));
      if (!status) problems.push(`${scene}: not ready in ${TIMEOUT_S} s`);
      else {
        const why = check(status, served.slice(servedBefore));
        if (why) problems.push(`${scene}: ${why}`);
        if ((status.errors || []).length) problems.push(`${scene}: the app reported errors: ${JSON.stringify(status.errors)}`);
      }
      if (!(picture.colours > 100 && picture.nonBackground > 0.2)) problems.push(`${scene}: the screenshot looks blank`);
      if (options?.gaps) {
        const seen = await page.evaluate(() => ({ busy: window.__tinygptBusy, frames: window.__tinygptFrames, timer: window.__tinygptTimer }));
        const all = Object.values(seen.busy).flat();
        const whole = frameGaps(all.length ? [Math.min(...all), Math.max(...all)] : null, seen);
        const cpu = options.gaps === "cpu-first" ? frameGaps(seen.busy.cpu, seen) : null;
        console.log(JSON.stringify({ scene, measuring: whole, measuring_cpu: cpu }));
        if (!whole.busy_ms) problems.push(`${scene}: the page never saw the measurement running`);
        else if (!(whole.frames > 0)) problems.push(`${scene}: no frame was drawn while measuring`);
        else {
          if (!(whole.max_thread_gap_ms < MAX_THREAD_GAP_MS)) problems.push(`${scene}: the page's thread was held for ${whole.max_thread_gap_ms.toFixed(0)} ms while measuring (bound ${MAX_THREAD_GAP_MS} ms)`);
          // While SwiftShader runs one submit the page presents no frame:
          // the kernel view's one step of small is one submit, whose GPU
          // time (its dispatches summed) depends on the machine (5.3 s on
          // the dev machine of 2026-11-25, 12.5-14.9 s on another, with
          // gaps of 15.5-16.2 s; 10.9 s with a gap of 16.4 s in the stop's
          // CI of 2026-11-27). The timestamps sum
          // the dispatches only, not SwiftShader's work between them, so the
          // bound is twice that step where it is over MAX_FRAME_GAP_MS: what
          // it catches is a gap well beyond the one unavoidable submit
          // (compiling every kernel in one go held the page 51 s).
          const oneSubmitMs = status?.speedup?.kernels?.total_ms || 0;
          const frameBound = Math.max(MAX_FRAME_GAP_MS, 2 * oneSubmitMs);
          if (!(whole.max_frame_gap_ms < frameBound)) problems.push(`${scene}: no frame for ${whole.max_frame_gap_ms.toFixed(0)} ms while measuring (bound ${frameBound.toFixed(0)} ms)`);
        }
        if (cpu && !cpu.busy_ms) problems.push(`${scene}: the page never saw the CPU being measured`);
      }
      await page.close();
    }
  } finally {
    await browser.close();
  }
  return problems;
}

// While the Speedup scene measures, the page must keep drawing: the
// longest gap between two animation frames, and between two runs of a 20 ms
// timer in the page (its thread held), over the whole measurement, under
// these bounds (ms; TINYGPT_WEB_MAX_FRAME_GAP_MS and
// TINYGPT_WEB_MAX_THREAD_GAP_MS change them). They are SwiftShader's: its
// GPU is this machine's two cores, and while it compiles one kernel (up to
// 2.4 s for a matmul) or runs one submit (a step of small takes 5.3 s) the
// browser presents no frame and a sync call of the compositor can wait
// for it. Measured on the dev machine (2026-11-25): frames 1.8 s (tiny's
// bench) and 5.8 s (small's kernel view) apart at most, the thread held
// 0.85 and 1.5 s. Before the kernels were compiled one a frame
// (`Kernels`), all of them went to the GPU process in one flush: 51 s
// without a frame, the thread held up to 24 s.
// TINYGPT_BROWSER_SCENES=lesson,flow runs only those of the scenes run.
const onlyScenes = (process.env.TINYGPT_BROWSER_SCENES || "").split(",").filter(Boolean);
const MAX_THREAD_GAP_MS = Number(process.env.TINYGPT_WEB_MAX_THREAD_GAP_MS || 4000);
const MAX_FRAME_GAP_MS = Number(process.env.TINYGPT_WEB_MAX_FRAME_GAP_MS || 15000);

// Runs in the page before the app: notes when a 20 ms timer runs and when
// each animation frame comes, and the first and last time the page's
// report says the Speedup scene is measuring.
function recordFrames() {
  window.__tinygptFrames = [];
  window.__tinygptTimer = [];
  // While measuring: `cpu` until the first result is in (`bench=tiny`
  // measures the CPU first), then `gpu`.
  window.__tinygptBusy = {};
  const busy = (t) => {
    const s = window.tinygptStatus?.speedup;
    if (s?.running) {
      const phase = s.results.length === 0 ? "cpu" : "gpu";
      window.__tinygptBusy[phase] ??= [t, t];
      window.__tinygptBusy[phase][1] = t;
    }
  };
  const tick = (t) => {
    window.__tinygptFrames.push(t);
    requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
  setInterval(() => {
    const t = performance.now();
    window.__tinygptTimer.push(t);
    busy(t);
  }, 20);
}

// The longest gap between two of `times` while measuring (the one after
// the last busy moment included), and how many there were.
function longestGap(busy, times) {
  let count = 0, maxGap = 0;
  for (let i = 1; i < times.length; i++) {
    if (times[i] < busy[0] || times[i - 1] > busy[1]) continue;
    count++;
    maxGap = Math.max(maxGap, times[i] - times[i - 1]);
  }
  return { count, max_gap_ms: maxGap };
}

function frameGaps(busy, { frames, timer }) {
  if (!busy) return { busy_ms: 0 };
  const f = longestGap(busy, frames), t = longestGap(busy, timer);
  return { busy_ms: busy[1] - busy[0], timer_runs: t.count, max_thread_gap_ms: t.max_gap_ms, frames: f.count, max_frame_gap_ms: f.max_gap_ms };
}

// A lost WebGPU device under a running trainer: the page's devices are
// recorded as the app asks for them, and once the run has a host copy they
// are destroyed (`GPUDevice.destroy()`, as a browser drops a device). The
// renderer starts again on a new device, the run goes on on the CPU from
// its last copy with a line saying so, and the page draws on.
async function lostGpuRun(base) {
  const browser = await launch(runs[0].args);
  const problems = [];
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
    // Bevy logs the loss and the renderer's errors that follow to the
    // console; a panic is what fails the run.
    page.on("console", (msg) => {
      if (msg.type() === "error" && /panicked/.test(msg.text())) problems.push(`console: ${msg.text()}`);
    });
    page.on("pageerror", (e) => problems.push(`uncaught: ${e.message}`));
    await page.addInitScript(() => {
      window.__tinygptDevices = [];
      const request = GPUAdapter.prototype.requestDevice;
      GPUAdapter.prototype.requestDevice = async function (...args) {
        const device = await request.apply(this, args);
        window.__tinygptDevices.push(device);
        return device;
      };
    });
    await page.goto(`${base}/#preset=tiny&seed=1337&scene=model&backend=gpu&train=1`);
    const before = await waitFor(page, (s) => s.backend === "gpu" && s.recovery_step >= 1, TIMEOUT_S);
    if (!before) {
      const s = await page.evaluate(() => ({ ...window.tinygptStatus, webgpu: window.tinygptHost.webgpu }));
      problems.push(`no GPU run with a host copy in ${TIMEOUT_S} s: ${JSON.stringify({ webgpu: s.webgpu, backend: s.backend, step: s.step, state: s.state, recovery_step: s.recovery_step, notice: s.notice, errors: s.errors })}`);
      return problems;
    }
    const destroyed = await page.evaluate(() => {
      window.__tinygptDevices.forEach((d) => d.destroy());
      return window.__tinygptDevices.length;
    });
    const after = await waitFor(
      page,
      (s) => s.backend === "cpu" && (s.errors || []).some((e) => /the GPU was lost/.test(e)) && s.step >= before.recovery_step + 5,
      TIMEOUT_S,
    );
    const shotPath = path.join(outDir, "lost-gpu.png");
    fs.mkdirSync(outDir, { recursive: true });
    const picture = pictureStats(await shoot(page, { path: shotPath }));
    const status = after || (await page.evaluate(() => ({ ...window.tinygptStatus })));
    console.log(JSON.stringify({
      run: "lost-gpu",
      devices_destroyed: destroyed,
      before: { step: before.step, recovery_step: before.recovery_step, backend: before.backend },
      after: { step: status.step, backend: status.backend, loss: status.loss, errors: status.errors },
      screenshot: picture,
    }));
    if (!after) problems.push(`the run did not go on on the CPU with a message: ${JSON.stringify({ backend: status.backend, step: status.step, errors: status.errors })}`);
    else {
      const from = Number((after.errors.join(" ").match(/CPU from step (\d+)/) || [])[1]);
      if (!(from >= before.recovery_step)) problems.push(`the message does not say from which step (${before.recovery_step} or later): ${after.errors}`);
    }
    if (after && !(after.loss_finite === true)) problems.push(`the CPU run's loss is not finite: ${after.loss}`);
    if (!(picture.colours > 100 && picture.nonBackground > 0.2)) problems.push("the page stopped drawing: the screenshot looks blank");
  } finally {
    await browser.close();
  }
  return problems;
}

// Offline (issue 38): a first visit opens a gallery model; once the
// service worker says this build's files are kept, the network is cut
// (playwright's offline mode, and the server answers nothing) and the page
// reloaded: it opens the model again from the page's cache, and a link for
// a fresh run opens and trains.
async function offlineRun(base) {
  const browser = await launch(runs[0].args);
  const problems = [];
  try {
    const context = await browser.newContext({ viewport: { width: 1280, height: 720 } });
    const page = await context.newPage();
    page.on("pageerror", (e) => problems.push(`uncaught: ${e.message}`));
    await page.goto(`${base}/#model=reverse&scene=attention`);
    // The reversal model, opened at its 3000 steps.
    const reversal = (s) => s.gallery === "reverse" && s.step >= 3000 && s.firstFrameMs !== null;
    const first = await waitFor(page, (s) => s.offline === true && reversal(s), TIMEOUT_S);
    if (!first) {
      const s = await page.evaluate(() => ({ ...window.tinygptStatus }));
      problems.push(`the first visit did not open the model with its files kept: ${JSON.stringify({ offline: s.offline, step: s.step, gallery: s.gallery, errors: s.errors })}`);
      return problems;
    }
    await context.setOffline(true);
    down = true;
    await page.reload();
    const again = await waitFor(page, reversal, TIMEOUT_S);
    await page.goto("about:blank");
    await page.goto(`${base}/#preset=tiny&seed=1337&train=1`);
    const trains = await waitFor(page, (s) => s.step >= 2 && s.gallery == null && s.loss_finite === true, TIMEOUT_S);
    const shotPath = path.join(outDir, "offline.png");
    fs.mkdirSync(outDir, { recursive: true });
    const picture = pictureStats(await shoot(page, { path: shotPath }));
    const status = trains || (await page.evaluate(() => ({ ...window.tinygptStatus })));
    down = false;
    console.log(JSON.stringify({
      run: "offline",
      first_visit: { step: first.step, gallery: first.gallery, backend: first.backend },
      offline_reload: again && { step: again.step, gallery: again.gallery, errors: again.errors },
      offline_training: { step: status.step, backend: status.backend, loss: status.loss, errors: status.errors },
      // The worker tries the network for the page first; nothing answers.
      asked_while_offline: askedWhileDown,
      screenshot: picture,
    }));
    if (!again) problems.push("the offline reload did not open the reversal model from the cache");
    if (!trains) problems.push(`offline, a fresh run did not train: ${JSON.stringify({ step: status.step, errors: status.errors })}`);
    if ((status.errors || []).length) problems.push(`offline, the app reported errors: ${JSON.stringify(status.errors)}`);
    if (!(picture.colours > 100 && picture.nonBackground > 0.2)) problems.push("offline, the screenshot looks blank");
  } finally {
    down = false;
    await browser.close();
  }
  return problems;
}

// 7. Keyboard only (issue 53): the next-byte lesson in Chromium with the
//    system's reduced motion on, driven by key presses alone: Tab onto the
//    canvas, Enter into the picture, arrows to a cell, whose numbers the
//    mirrored tree (hidden elements inside the canvas) names as the canvas's
//    active descendant; Escape out; every step of the lesson by Page Down,
//    each question answered with its number key, each step said in the
//    live region. Then a press on a mirrored button (a screen reader's
//    click) presses the app's.
async function accessRun(base) {
  const browser = await launch(runs[0].args);
  const problems = [];
  try {
    const context = await browser.newContext({ viewport: { width: 1280, height: 720 }, reducedMotion: "reduce" });
    const page = await context.newPage();
    page.on("pageerror", (e) => problems.push(`uncaught: ${e.message}`));
    await page.goto(`${base}/#lesson=next-byte`);
    const ready = await waitFor(page, (s) => s.firstFrameMs !== null && (s.access?.nodes || []).length > 20 && s.lesson, TIMEOUT_S);
    if (!ready) {
      problems.push("the lesson's page never mirrored its accessibility tree");
      return problems;
    }
    if (ready.reduced_motion !== true) problems.push("the page's prefers-reduced-motion did not turn reduced motion on");
    // Tab stays on the canvas and moves the app's focus onto a control;
    // Escape leaves the controls for the picture's keys.
    await page.keyboard.press("Tab");
    const onCanvas = await page.evaluate(() => document.activeElement?.id);
    if (onCanvas !== "tinygpt") problems.push(`after Tab the page's focus is on ${JSON.stringify(onCanvas)}, not the canvas`);
    const control = await waitFor(page, (s) => s.access?.focused?.clickable === true, 10);
    if (!control) problems.push("Tab focused no control of the app");
    await page.keyboard.press("Escape");
    if (!(await waitFor(page, (s) => !s.access?.focused, 20))) problems.push("Escape did not leave the controls");
    // Enter goes into the picture only once it lists its parts (the 3D
    // layout is built on a worker: seconds on this machine).
    if (!(await waitFor(page, (s) => s.access?.nodes?.some((n) => n.role === "Group"), 60))) {
      problems.push("the 3D picture listed no parts");
    }
    // Each key once the last one's effect shows (frames are slow here).
    const steps3d = [
      ["Enter", (f) => f?.role === "Group"],
      ["ArrowRight", (f, before) => f?.role === "Group" && f.id !== before?.id],
      ["Enter", (f) => f?.role === "GridCell"],
      ["ArrowDown", (f) => f?.role === "GridCell" && /\[1, 0\]/.test(f.name)],
    ];
    for (const [key, shows] of steps3d) {
      const before = (await page.evaluate(() => window.tinygptStatus.access?.focused)) || null;
      await page.keyboard.press(key);
      if (!(await waitFor(page, (s) => shows(s.access?.focused, before), 30))) {
        problems.push(`after ${key} the focus is ${JSON.stringify(await page.evaluate(() => window.tinygptStatus.access?.focused))}`);
        break;
      }
    }
    const cell = await waitFor(page, (s) => s.access?.focused?.role === "GridCell" && /\[1, 0\] = /.test(s.access.focused.name), 30);
    const said = await page.evaluate(() => {
      const id = document.getElementById("tinygpt").getAttribute("aria-activedescendant");
      const el = id && document.getElementById(id);
      return { id, label: el?.getAttribute("aria-label"), role: el?.getAttribute("role") };
    });
    if (!cell) problems.push(`the keys did not reach cell (1, 0) of a tensor: ${JSON.stringify((await page.evaluate(() => window.tinygptStatus.access?.focused)))}`);
    else if (said.label !== cell.access.focused.name) problems.push(`the canvas's active descendant says ${JSON.stringify(said)}, the app ${JSON.stringify(cell.access.focused.name)}`);
    await page.keyboard.press("Escape");
    await waitFor(page, (s) => s.access?.focused?.role === "Group", 20);
    await page.keyboard.press("Escape");
    const out = await waitFor(page, (s) => !s.access?.focused, 20);
    if (!out) problems.push("Escape twice did not leave the picture");
    // The lesson, step by step, by keys alone.
    const steps = ready.lesson.steps;
    const answered = [];
    for (let k = 1; k <= steps; k++) {
      const heard = (s) => (s.announcements || []).some((a) => a.includes(`${k} of ${steps}`));
      const at = await waitFor(page, (s) => s.lesson?.step === k && heard(s), 30);
      if (!at) {
        const s = await page.evaluate(() => ({ lesson: window.tinygptStatus.lesson, announcements: window.tinygptStatus.announcements }));
        problems.push(`step ${k} was not reached or not announced: ${JSON.stringify(s)}`);
        break;
      }
      await page.keyboard.press("Digit1");
      const chose = await waitFor(page, (s) => s.lesson?.chosen === 0, 2);
      if (chose) answered.push(k);
      if (k < steps) await page.keyboard.press("PageDown");
    }
    if (answered.length < 4) problems.push(`only steps ${answered} took an answer from the keys (the lesson has four questions)`);
    await page.waitForTimeout(300);
    const live = await page.evaluate(() => [document.getElementById("a11y-live").textContent, window.tinygptStatus.announced]);
    if (live[0] !== live[1]) problems.push(`the live region says ${JSON.stringify(live[0])}, the app last said ${JSON.stringify(live[1])}`);
    // A screen reader's click on the mirrored "Attention" button.
    await page.evaluate(() => {
      const b = [...document.querySelectorAll("#a11y-tree button")].find((e) => e.getAttribute("aria-label") === "Attention");
      b?.click();
    });
    const switched = await waitFor(page, (s) => s.scene === "attention", 30);
    if (!switched) problems.push("a click on the mirrored Attention button did not open the Attention scene");
    // In the Attention scene, Enter goes into the picture at its first head.
    let head = null;
    if (switched) {
      await waitFor(page, (s) => (s.access?.nodes || []).some((n) => n.role === "Group" && /^block 0, head 0/.test(n.name)), 60);
      await page.keyboard.press("Enter");
      head = await waitFor(page, (s) => s.access?.focused?.role === "Group" && /^block 0, head 0, \d+ by \d+$/.test(s.access.focused.name), 30);
      if (!head) problems.push(`Enter did not focus the first head's map: ${JSON.stringify(await page.evaluate(() => window.tinygptStatus.access?.focused))}`);
      // The picture in words: the mirrored figure's description, and F9
      // says it through the live region.
      const line = (s) => (s.access?.nodes || []).find((n) => n.role === "Figure" && /^Attention over .*\(weight \d\.\d\d\)/.test(n.description || ""));
      const described = await waitFor(page, line, 30);
      const mirrored = await page.evaluate(() => document.querySelector("#a11y-tree [role=figure]")?.getAttribute("aria-description") || "");
      if (!described) problems.push("the Attention picture's description does not say its strongest look");
      else if (mirrored !== line(described).description) problems.push(`the mirrored figure says ${JSON.stringify(mirrored)}, the app ${JSON.stringify(line(described).description)}`);
      await page.keyboard.press("F9");
      const heard = await waitFor(page, (s) => (s.announcements || []).some((a) => a.includes("Attention over")), 20);
      if (!heard) problems.push("F9 did not say the picture's line through the live region");
    }
    // axe-core over the page's DOM (the mirrored tree included), WCAG 2.2
    // A and AA rules: no violation.
    await page.addScriptTag({ path: path.join(here, "node_modules/axe-core/axe.min.js") });
    const axe = await page.evaluate(async () => {
      const r = await window.axe.run(document, { runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"] } });
      return { passes: r.passes.length, violations: r.violations.map((v) => ({ id: v.id, nodes: v.nodes.length, example: v.nodes[0]?.html?.slice(0, 160) })) };
    });
    if (axe.violations.length) problems.push(`axe-core: ${JSON.stringify(axe.violations)}`);
    console.log(JSON.stringify({ run: "access", reduced_motion: ready.reduced_motion, axe_passes: axe.passes, axe_violations: axe.violations.length, cell: cell?.access?.focused?.name, active_descendant: said, answered, steps, scene: switched?.scene, head: head?.access?.focused?.name }));
  } finally {
    await browser.close();
  }
  return problems;
}

// 6. A live class (issue 57): the native `tinygpt class` serves web/dist;
//    in Chromium (no WebGPU: the CPU, as on a school's plain-http network)
//    a teacher's page and three students' pages (one phone-sized), each
//    joined through the join page with the code. The teacher steps on (Page Down): every
//    student's page has the step within a second of the teacher's page
//    sending it; the students answer (keys 1–4); the teacher's bars count
//    exactly those answers; the teacher reveals (the panel's button, or its
//    key R) and every student sees the right answer with the class's counts.
async function classRun() {
  const problems = [];
  const bin = process.env.TINYGPT_BIN ||
    path.join(process.env.CARGO_TARGET_DIR || path.join(os.homedir(), ".cache", "tinygpt-target"), "release", "tinygpt");
  if (!fs.existsSync(bin)) return [`no ${bin}: build it first (cargo build --release), or set TINYGPT_BIN`];
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "tinygpt-class-browser-"));
  const child = spawn(bin, ["class", "--lesson", "attention", "--port", "0", "--session", path.join(dir, "class.jsonl"), "--web", dist],
    { stdio: ["ignore", "pipe", "pipe"] });
  let serverLog = "";
  child.stderr.on("data", (d) => { serverLog += d; });
  const link = await new Promise((resolve) => {
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/http:\/\/127\.0\.0\.1:(\d+)\/#class=([A-Z0-9]+)&teacher=([0-9a-f]+)/);
      if (m) resolve({ port: m[1], code: m[2], token: m[3] });
    });
    child.on("exit", () => resolve(null));
  });
  if (!link) return [`tinygpt class did not start: ${serverLog}`];
  const base = `http://127.0.0.1:${link.port}`;
  // Four windows on one screen: none of them may be throttled as hidden
  // (each student has a screen of their own).
  const browser = await launch([...runs[1].args, "--disable-backgrounding-occluded-windows",
    "--disable-renderer-backgrounding", "--disable-background-timer-throttling"]);
  // (A page between documents has no status yet.)
  const status = (page) => page.evaluate(() => ({ ...window.tinygptStatus })).catch(() => ({}));
  const until = async (what, pages, ready, seconds) => {
    const t0 = Date.now();
    for (;;) {
      const all = await Promise.all(pages.map(status));
      if (all.every(ready)) return Date.now() - t0;
      if (Date.now() - t0 > seconds * 1000) {
        problems.push(`${what} not within ${seconds} s: ${JSON.stringify(all.map((s) => ({ class: s.class, lesson: s.lesson })))}`);
        return null;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  try {
    const open = async (url, phone = false) => {
      // A phone-sized page: 412×860, one device pixel per CSS pixel (a
      // phone's 2.625 is the hidpi-webgl2 run's: Chromium's emulation here
      // reports a ResizeObserver's device-pixel box in CSS pixels against
      // the emulated devicePixelRatio, so the layout would be drawn twice
      // as large: the emulation's, not a phone's).
      const context = await browser.newContext({ viewport: phone ? { width: 412, height: 860 } : { width: 1280, height: 720 } });
      const page = await context.newPage();
      page.on("console", (msg) => { if (msg.type() === "error") problems.push(`console error: ${msg.text()}`); });
      page.on("pageerror", (e) => problems.push(`uncaught: ${e.message}`));
      await page.goto(url);
      return page;
    };
    const teacher = await open(`${base}/#class=${link.code}&teacher=${link.token}`);
    const students = [];
    for (const [i, nickname] of ["Ana", "Ben", ""].entries()) {
      const page = await open(`${base}/join`, i === 2);
      await page.fill("#code", link.code.toLowerCase());
      if (nickname) await page.fill("#name", nickname);
      await page.click("button[type=submit]");
      await page.waitForURL(/#class=/, { timeout: 30000 });
      students.push(page);
    }
    const inClass = (s) => s.class?.status === "in" && s.lesson?.name === "attention";
    if (await until("every page in the class", [teacher, ...students], inClass, TIMEOUT_S) === null) return problems;
    const q = 3; // the attention lesson's question (tests/class.rs checks the lesson asks there)
    // The teacher steps on with the clicker's key; every student follows.
    // A press held over a frame or two: four software-rendered pages on
    // two cores draw a few frames a second.
    const press = async (page, x, y) => {
      await page.mouse.move(x, y);
      await page.mouse.down();
      await page.waitForTimeout(200);
      await page.mouse.up();
    };
    await press(teacher, 200, 200);
    // Timed two ways: the message's path (the teacher's page sending the
    // step to each student's page receiving it, both stamped with the
    // machine's one clock), and until each student's lesson is on it as
    // this test sees it (which adds the pages' frames on a loaded machine).
    const follow = [];
    const seen = [];
    for (let step = 2; step <= q + 1; step++) {
      await teacher.keyboard.press("PageDown");
      const ms = await until(`the students on step ${step}`, students, (s) => s.lesson?.step === step, 20);
      if (ms === null) return problems;
      seen.push(ms);
      const sent = (await status(teacher)).class?.goto_sent_ms;
      for (const s of await Promise.all(students.map(status))) {
        const got = s.class?.step_arrived_ms;
        if (sent && got && sent[0] === step - 1 && got[0] === step - 1) follow.push(got[1] - sent[1]);
        else problems.push(`no timing for step ${step}: sent ${JSON.stringify(sent)}, arrived ${JSON.stringify(got)}`);
      }
    }
    // Answers by key: 2, 2, 1 (0-based 1, 1, 0).
    const picks = [1, 1, 0];
    for (const [i, page] of students.entries()) {
      await press(page, 200, 200);
      await page.keyboard.press(String(picks[i] + 1));
    }
    await until("every answer acknowledged", students, (s) => (s.class?.accepted || []).some(([st]) => st === q), 60);
    const want = [1, 2, 0, 0];
    const counted = (s) => JSON.stringify((s.class?.tallies || []).find((t) => t.step === q)?.counts) === JSON.stringify(want);
    await until("the teacher's bars", [teacher], counted, 30);
    const hidden = await Promise.all(students.map(status));
    if (hidden.some((s) => (s.class?.state?.reveals || []).length)) problems.push("the answers were revealed before the teacher revealed them");
    // The teacher reveals (the class panel's button).
    const t = await status(teacher);
    const ratio = await teacher.evaluate(() => window.devicePixelRatio);
    const r = t.class?.reveal_button;
    if (!r) {
      problems.push(`the class panel drew no Reveal button: ${JSON.stringify(t.class)}`);
      return problems;
    }
    await press(teacher, (r[0] + r[2]) / 2 / ratio, (r[1] + r[3]) / 2 / ratio);
    // (A click on a page drawing a few frames a second can go unseen by
    // egui here; the panel's key, R, reveals as the button does.)
    await teacher.waitForTimeout(3000);
    if (!((await status(teacher)).class?.state?.reveals || []).length) await teacher.keyboard.press("r");
    const revealed = (s) => (s.class?.state?.reveals || []).some((v) => v.step === q && JSON.stringify(v.counts) === JSON.stringify(want));
    const revealMs = await until("the reveal on every student's page", students, revealed, 30);
    fs.mkdirSync(outDir, { recursive: true });
    await shoot(teacher, { path: path.join(outDir, "class-teacher.png") });
    await shoot(students[0], { path: path.join(outDir, "class-student.png") });
    await shoot(students[2], { path: path.join(outDir, "class-phone.png") });
    console.log(JSON.stringify({ run: "class", students: students.length, follow_ms: follow, seen_ms: seen, reveal_ms: revealMs, counts: want }));
    for (const ms of follow) if (ms > 1000) problems.push(`a student's page got the teacher's step ${ms} ms after it was sent (more than a second)`);
  } finally {
    if (problems.length) console.error(`the class server's log:\n${serverLog.split("\n").slice(-30).join("\n")}`);
    await browser.close();
    child.kill("SIGINT");
    await new Promise((r) => child.on("exit", r));
    fs.rmSync(dir, { recursive: true, force: true });
  }
  return problems;
}

// The trainer worker's `tinygpt bench` on 1 and 2 threads in an empty
// page of the isolated origin: the threaded step with nothing drawing
// beside it (on this 2-core machine SwiftShader's WebGL2 drawing of the app
// takes most of a core).
async function workerBench(isolatedBase, preset, threads, seconds) {
  const browser = await launch(["--disable-features=WebGPU"]);
  try {
    const page = await browser.newPage();
    await page.goto(`${isolatedBase}/__blank.html`);
    return await page.evaluate(({ preset, threads, seconds }) => new Promise((resolve, reject) => {
      const worker = new Worker("./trainer-worker.js", { type: "module" });
      worker.onerror = (e) => reject(new Error(`the worker did not start: ${e.message}`));
      worker.onmessage = ({ data }) => {
        if (data.kind === "bench") resolve(JSON.parse(data.json));
        else if (data.kind === "error") reject(new Error(data.message));
      };
      worker.postMessage({ kind: "init", threads });
      worker.postMessage({ kind: "bench", preset, seconds });
    }), { preset, threads, seconds });
  } finally {
    await browser.close();
  }
}

// The CPU fallback on the page's thread and in the trainer worker (7.).
async function threadsRun(plainBase, isolatedBase) {
  const problems = [];
  for (const preset of ["tiny", "small"]) {
    const ms = {};
    for (const threads of [1, 2]) {
      try {
        const r = await workerBench(isolatedBase, preset, threads, 3);
        ms[threads] = r.median_ms;
        console.log(JSON.stringify({ worker_bench: preset, threads, device: r.device, median_ms: r.median_ms,
          min_ms: r.min_ms, max_ms: r.max_ms, steps: r.steps, tokens_per_s: r.tokens_per_s }));
        if (!(r.median_ms > 0)) problems.push(`worker bench ${preset} on ${threads} threads: no step time (${r.median_ms})`);
      } catch (e) {
        problems.push(`worker bench ${preset} on ${threads} threads: ${e.message}`);
      }
    }
    if (ms[1] && ms[2]) console.log(JSON.stringify({ worker_bench_speedup: preset, "1_thread_ms/2_threads_ms": ms[1] / ms[2] }));
  }
  const args = ["--disable-features=WebGPU", "--use-angle=swiftshader", "--enable-unsafe-swiftshader"];
  const results = {};
  for (const preset of ["tiny", "small"]) {
    for (const [where, base, threads] of [["page", plainBase, null], ["worker", isolatedBase, 1], ["worker", isolatedBase, 2]]) {
      const name = `${preset}-${where}${threads ? `-${threads}` : ""}`;
      const steps = preset === "tiny" ? 40 : 16;
      const before = problems.length;
      const browser = await launch(args);
      try {
        const page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
        page.on("console", (msg) => { if (msg.type() === "error") problems.push(`${name}: console error: ${msg.text()}`); });
        page.on("pageerror", (e) => problems.push(`${name}: uncaught: ${e.message}`));
        const query = threads ? `?threads=${threads}` : "";
        await page.goto(`${base}/${query}#preset=${preset}&seed=1337&train=1`);
        // Each step's own time as the app reported it (the last step's, so
        // sampled often), after the first few (warm-up).
        const ms = new Map();
        const t0 = Date.now();
        let status = null;
        for (;;) {
          status = await page.evaluate(() => ({ ...window.tinygptStatus, isolated: self.crossOriginIsolated }));
          if (status.step > 3 && Number.isFinite(status.ms_per_step)) ms.set(status.step, status.ms_per_step);
          if (status.step >= steps || problems.length > before || Date.now() - t0 > TIMEOUT_S * 1000) break;
          await page.waitForTimeout(100);
        }
        const times = (status.stepTimes || []).filter(([, step]) => step > 3);
        const [first, last] = [times[0], times[times.length - 1]];
        const stepsPerS = first && last && last[0] > first[0] ? (last[1] - first[1]) / ((last[0] - first[0]) / 1e3) : null;
        const sorted = [...ms.values()].sort((a, b) => a - b);
        const median = sorted.length ? sorted[Math.floor(sorted.length / 2)] : null;
        results[name] = { median_ms: median, steps_per_s: stepsPerS };
        console.log(JSON.stringify({ threads_run: name, isolated: status.isolated, worker_threads: status.worker_threads ?? null,
          backend: status.backend, steps: status.step, loss: status.loss, median_ms_per_step: median, samples: sorted.length,
          steps_per_s: stepsPerS, timelapse_frames: status.timelapse_frames, errors: status.errors }));
        const check = (ok, what) => { if (!ok) problems.push(`${name}: ${what}`); };
        check(status.backend === "cpu", `trained on ${status.backend}, expected cpu`);
        check(status.step >= steps, `only ${status.step} of ${steps} steps in ${TIMEOUT_S} s`);
        check(status.loss_finite === true, `the last loss is not finite: ${status.loss}`);
        check((status.errors || []).length === 0, `the app reported errors: ${JSON.stringify(status.errors)}`);
        check(status.timelapse_frames >= 3, `the run recorded ${status.timelapse_frames} time-lapse frames in ${status.step} steps`);
        if (threads) {
          check(status.isolated === true, "the page served with COOP and COEP is not cross-origin isolated");
          check(status.worker_threads === threads, `the run trains on ${status.worker_threads} worker threads, expected ${threads}`);
          if (preset === "tiny" && threads === 2 && problems.length === before) {
            // Paused, the run comes home; trained on, it goes back and
            // goes on from where it was; a save takes it home and back.
            await clickNamed(page, "⏸ Pause");
            const home = await waitFor(page, (s) => s.state === "Paused" && s.worker_threads == null && s.trainerRecalls >= 1, 60);
            check(home, "paused, the run did not come back from the worker");
            if (home) {
              await clickNamed(page, "▶ Train");
              const again = await waitFor(page, (s) => s.step >= home.step + 5 && s.worker_threads === threads && s.trainerStarts >= 2, 120);
              check(again, `trained on after the pause, the run did not go back to the worker and on from step ${home.step}`);
              if (again) {
                const [download] = await Promise.all([page.waitForEvent("download", { timeout: 120000 }), clickNamed(page, "Download checkpoint")]);
                const header = safetensorsHeader(fs.readFileSync(await download.path()));
                const step = Number(header.__metadata__?.step);
                check(step >= again.step, `the checkpoint saved from the worker's run is at step ${step}, before ${again.step}`);
                for (const t of ["transformer.wte.weight", "adam.m.transformer.wte.weight", "adam.v.transformer.wte.weight"]) {
                  check(header[t], `the checkpoint saved from the worker's run lacks ${t}`);
                }
                const after = await waitFor(page, (s) => s.step >= step + 5 && s.worker_threads === threads, 120);
                check(after, "after the save the run did not train on in the worker");
                console.log(JSON.stringify({ threads_run: name, paused_at: home.step, resumed_to: again.step, saved_step: step,
                  hand_overs: (after || again).trainerStarts, recalls: (after || again).trainerRecalls }));
              }
            }
          }
        } else {
          check(status.isolated === false && status.worker_threads == null,
            `the page without isolation trains in a worker (${status.worker_threads} threads)`);
        }
      } finally {
        await browser.close();
      }
    }
    const page = results[`${preset}-page`], two = results[`${preset}-worker-2`], one = results[`${preset}-worker-1`];
    if (page?.median_ms && two?.median_ms && one?.median_ms) {
      console.log(JSON.stringify({ threads_speedup: preset, "page_ms/worker2_ms": page.median_ms / two.median_ms,
        "worker1_ms/worker2_ms": one.median_ms / two.median_ms, "page_ms/worker1_ms": page.median_ms / one.median_ms }));
    }
  }
  return problems;
}

const server = await serve();
const base = `http://127.0.0.1:${server.address().port}`;
const isolatedServer = await serve({ isolated: true });
const isolatedBase = `http://127.0.0.1:${isolatedServer.address().port}`;
// TINYGPT_BROWSER_ONLY=offline,scenes (the names in brackets below) runs
// only those, while working on one.
const only = (process.env.TINYGPT_BROWSER_ONLY || "").split(",").filter(Boolean);
const wanted = (name) => only.length === 0 || only.includes(name);
let failed = false;
const groups = [
  ...runs.map((run) => [run.name, () => runOnce(base, run)]),
  ["scenes", () => scenesRun(base)],
  ["offline", () => offlineRun(base)],
  ["lost-gpu", () => lostGpuRun(base)],
  ["class", () => classRun()],
  ["access", () => accessRun(base)],
  ["threads", () => threadsRun(base, isolatedBase)],
];
for (const [name, run] of groups.filter(([name]) => wanted(name))) {
  const problems = await run();
  for (const p of problems) console.error(`[${name}] ${p}`);
  failed ||= problems.length > 0;
}
server.close();
isolatedServer.close();
process.exit(failed ? 1 : 0);
