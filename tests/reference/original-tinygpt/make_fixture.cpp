// make_fixture.cpp: a .tinygpt file written by the original TinyGPT's own
// model code (src/, its wasm/src at commit fe91f26 of
// github.com/sarthak-fleet/tinygpt, MIT: LICENSE), and that code's numbers
// for it, for tests/original.rs.
//
// It trains a small model (ctx 16, 2 layers, 2 heads, dModel 32) for 40 steps
// on a fixed text with the C ABI its browser Worker calls (tg_model_create,
// tg_set_data, tg_train_step), saves it as its browser app does
// (encodeModelFile in browser/src/main.ts: "TGPT", version 2, the JSON
// header, tg_export_state's bytes), then writes, as JSON with every float
// exact (%.9g):
//   - the logits (T, 256) of its forward pass on one window (B 1);
//   - the logits on that window after one more AdamW step (lr 3e-3, clip 1)
//     on a fixed batch of 4 windows, which uses the saved AdamW moments.
//
// Run by make-fixtures.sh (g++; node for its fp16 converter).

#include "src/model.cpp"

#include <cstdio>
#include <string>

static const char* kText =
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
    "All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to "
    "die than to famish?\n\nAll:\nResolved. resolved.\n\nFirst Citizen:\n"
    "First, you know Caius Marcius is chief enemy to the people.\n\nAll:\n"
    "We know't, we know't.\n\nFirst Citizen:\nLet us kill him, and we'll have "
    "corn at our own price.\nIs't a verdict?\n\nAll:\nNo more talking on't; "
    "let it be done: away, away!\n\nSecond Citizen:\nOne word, good citizens.\n";

static const int kCtx = 16, kLayers = 2, kHeads = 2, kDModel = 32, kDMlp = 128;
static const int kBatch = 4, kSteps = 40;
static const float kLr = 3e-3f, kClip = 1.0f;
static const unsigned kSeed = 7;

static void write_logits(FILE* f, const Model& m, int T) {
  std::fputc('[', f);
  for (int i = 0; i < T * m.V; ++i)
    std::fprintf(f, "%s%.9g", i ? "," : "", m.acts.logits[i]);
  std::fputc(']', f);
}

static std::string manifest_json() {
  // buildManifest (browser/src/main.ts): names and shapes as it writes them.
  std::string out = "[";
  long off = 0;
  auto push = [&](const std::string& name, std::initializer_list<int> shape) {
    long n = 1;
    std::string dims;
    for (int d : shape) {
      n *= d;
      dims += (dims.empty() ? "" : ",") + std::to_string(d);
    }
    if (out.size() > 1) out += ",";
    out += "{\"name\":\"" + name + "\",\"shape\":[" + dims + "],\"floatOffset\":" +
           std::to_string(off) + "}";
    off += n;
  };
  const int C = kDModel, V = 256;
  push("token_embedding.weight", {V, C});
  push("position_embedding.weight", {kCtx, C});
  push("ln_final.weight", {C});
  push("ln_final.bias", {C});
  for (int i = 0; i < kLayers; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    push(b + "ln1.weight", {C});
    push(b + "ln1.bias", {C});
    for (const char* p : {"q", "k", "v", "o"}) {
      push(b + "attn." + p + "_proj.weight", {C, C});
      push(b + "attn." + p + "_proj.bias", {C});
    }
    push(b + "ln2.weight", {C});
    push(b + "ln2.bias", {C});
    push(b + "mlp.fc_in.weight", {kDMlp, C});
    push(b + "mlp.fc_in.bias", {kDMlp});
    push(b + "mlp.fc_out.weight", {C, kDMlp});
    push(b + "mlp.fc_out.bias", {C});
  }
  return out + "]";
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: make_fixture OUT.tinygpt OUT.json\n");
    return 2;
  }
  const std::string text = kText;
  Model* m = static_cast<Model*>(
      tg_model_create(256, kCtx, kLayers, kHeads, kDModel, kDMlp, kSeed));
  tg_set_data(m, reinterpret_cast<const unsigned char*>(text.data()),
              static_cast<int>(text.size()), 0.9f);
  std::string history = "[";
  float loss = 0.0f;
  for (int s = 1; s <= kSteps; ++s) {
    loss = tg_train_step(m, kBatch, kLr, kClip);
    char point[96];
    std::snprintf(point, sizeof point, "%s{\"step\":%d,\"train\":%.4f,\"val\":null}",
                  s > 1 ? "," : "", s, loss);
    history += point;
  }
  history += "]";

  // The file, as encodeModelFile writes it.
  std::vector<unsigned char> state(tg_state_bytes(m));
  tg_export_state(m, state.data());
  char config[512];
  std::snprintf(config, sizeof config,
                "{\"ctx\":%d,\"layers\":%d,\"heads\":%d,\"dModel\":%d,\"dMlp\":%d,"
                "\"batchSize\":%d,\"learningRate\":0.003,\"gradClip\":1,"
                "\"maxSteps\":%d,\"evalEvery\":50,\"seed\":%u,\"backend\":\"wasm\"}",
                kCtx, kLayers, kHeads, kDModel, kDMlp, kBatch, kSteps, kSeed);
  char final_loss[128];
  std::snprintf(final_loss, sizeof final_loss,
                "{\"step\":%d,\"train\":%.9g,\"val\":null}", kSteps, loss);
  const std::string header =
      std::string("{\"version\":2,\"savedAt\":\"2026-11-25T00:00:00.000Z\",\"config\":") +
      config + ",\"corpus\":\"custom\",\"manifest\":" + manifest_json() +
      ",\"includesOptimizerState\":true,\"stateByteLength\":" +
      std::to_string(state.size()) + ",\"lossHistory\":" + history +
      ",\"finalLoss\":" + final_loss +
      ",\"sample\":\"\",\"bestVal\":null,\"project\":\"https://github.com/sarthak-fleet/tinygpt\"}";
  FILE* f = std::fopen(argv[1], "wb");
  if (!f) return 1;
  const unsigned version = 2, len = static_cast<unsigned>(header.size());
  std::fwrite("TGPT", 1, 4, f);
  std::fwrite(&version, 4, 1, f);
  std::fwrite(&len, 4, 1, f);
  std::fwrite(header.data(), 1, header.size(), f);
  std::fwrite(state.data(), 1, state.size(), f);
  std::fclose(f);

  // Its logits on one window (the first kCtx bytes of the text).
  std::vector<int> window(kCtx);
  for (int t = 0; t < kCtx; ++t) window[t] = static_cast<unsigned char>(text[t]);
  FILE* j = std::fopen(argv[2], "w");
  if (!j) return 1;
  std::fprintf(j, "{\"prompt\":[");
  for (int t = 0; t < kCtx; ++t) std::fprintf(j, "%s%d", t ? "," : "", window[t]);
  std::fprintf(j, "],\"logits\":");
  forward(*m, window.data(), 1, kCtx);
  write_logits(j, *m, kCtx);

  // One more AdamW step on a fixed batch: windows at 0, 40, 80, 120.
  std::vector<int> ids(kBatch * kCtx), targets(kBatch * kCtx);
  std::fprintf(j, ",\"step_batch\":[");
  for (int b = 0; b < kBatch; ++b)
    for (int t = 0; t <= kCtx; ++t)
      std::fprintf(j, "%s%d", b + t ? "," : "",
                   static_cast<unsigned char>(text[40 * b + t]));
  std::fprintf(j, "],\"step_lr\":%.9g,\"step_loss\":", kLr);
  for (int b = 0; b < kBatch; ++b)
    for (int t = 0; t < kCtx; ++t) {
      ids[b * kCtx + t] = static_cast<unsigned char>(text[40 * b + t]);
      targets[b * kCtx + t] = static_cast<unsigned char>(text[40 * b + t + 1]);
    }
  forward(*m, ids.data(), kBatch, kCtx);
  for (Param* p : m->params) std::fill(p->g.begin(), p->g.end(), 0.0f);
  std::vector<float> dlogits(static_cast<long>(kBatch) * kCtx * m->V);
  const float step_loss = cross_entropy(*m, targets.data(), dlogits.data());
  backward(*m, ids.data(), dlogits.data());
  optimizer_step(*m, kLr, kClip);
  std::fprintf(j, "%.9g,\"logits_after_step\":", step_loss);
  forward(*m, window.data(), 1, kCtx);
  write_logits(j, *m, kCtx);
  std::fprintf(j, "}\n");
  std::fclose(j);
  tg_model_free(m);
  return 0;
}
