// TinyGPT Explainer's service worker: the page works offline after its
// first visit (issue 38).
//
// web/build.sh writes __APP_STAMP__ (a hash of the page, tinygpt.js and the
// wasm) and __GALLERY_STAMP__ (of the gallery's files) into its copy in
// web/dist. The page asks for tinygpt.js and the wasm with `?v=APP_STAMP`,
// so a build's files are cached under names no other build uses:
// - the page itself: from the network when there is one (a new build's page
//   names its new files), else from the cache;
// - tinygpt.js, the icons and the manifest: fetched when this worker
//   installs, then from the cache, kept in `tinygpt-app-APP_STAMP`; the
//   wasm too, which the page puts there itself once it has downloaded it
//   (so the first visit downloads it once, not twice);
// - the gallery's models and texts: the page keeps them itself, in
//   `tinygpt-gallery-GALLERY_STAMP` (index.html's galleryFile).
// A new build's service worker (its stamp differs, so the browser installs
// it) takes over at once and deletes the caches of earlier builds.
//
// Every same-origin response it gives the page carries COOP and COEP
// (issue 55): the page is then cross-origin isolated, which wasm threads
// need, so from the second visit on (the first is not yet this worker's) a
// run without WebGPU trains in the threaded trainer worker even where the
// server sends no such headers (a plain static server, a school's). The
// trainer worker's files (web/trainer-worker.js, worker/) are kept with the
// page's (SHELL), so it trains offline too.

const APP_CACHE = "tinygpt-app-__APP_STAMP__";
const GALLERY_CACHE = "tinygpt-gallery-__GALLERY_STAMP__";
const SHELL = [
  "./",
  "./tinygpt.js?v=__APP_STAMP__",
  "./manifest.webmanifest",
  "./icons/icon.svg",
  "./icons/icon-192.png",
  "./icons/icon-512.png",
  // The trainer worker's files, where the build has them (web/build.sh
  // writes them here): a page without WebGPU trains in it offline too.
  /*__WORKER_SHELL__*/
];

self.addEventListener("install", (event) => {
  event.waitUntil(
    caches.open(APP_CACHE)
      .then((cache) => cache.addAll(SHELL))
      .then(() => self.skipWaiting()),
  );
});

self.addEventListener("activate", (event) => {
  event.waitUntil(
    caches.keys()
      .then((names) => Promise.all(names
        .filter((n) => n.startsWith("tinygpt-") && n !== APP_CACHE && n !== GALLERY_CACHE)
        .map((n) => caches.delete(n))))
      .then(() => self.clients.claim()),
  );
});

// A response as it came, with the headers that isolate the page.
function isolated(response) {
  if (!response || response.type === "opaque" || response.type === "error" || response.status === 0) return response;
  const headers = new Headers(response.headers);
  headers.set("Cross-Origin-Opener-Policy", "same-origin");
  headers.set("Cross-Origin-Embedder-Policy", "require-corp");
  return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
}

self.addEventListener("fetch", (event) => {
  const request = event.request;
  if (request.method !== "GET" || new URL(request.url).origin !== self.location.origin) return;
  if (request.mode === "navigate") {
    // The page: fresh when online (and kept), the kept one when not.
    event.respondWith(
      fetch(request)
        .then((response) => {
          if (response.ok) {
            const copy = response.clone();
            caches.open(APP_CACHE).then((cache) => cache.put("./", copy));
          }
          return isolated(response);
        })
        .catch(() => caches.match("./", { cacheName: APP_CACHE })
          .then((kept) => (kept ? isolated(kept) : Response.error()))),
    );
    return;
  }
  // Everything else: the cache first (a build's files never change under
  // their versioned names), then the network.
  event.respondWith(
    caches.match(request).then((kept) => kept || fetch(request)).then(isolated),
  );
});
