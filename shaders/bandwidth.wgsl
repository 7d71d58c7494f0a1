// The memory ceiling of the roofline (`bench::gpu_copy_gbps`): a streaming
// copy, each element read once and written once, as wide as WGSL loads go.
//
// Bindings (group 0):
//   0  src  array<vec4<f32>>  read        (n4)   n4 = bytes / 16
//   1  dst  array<vec4<f32>>  read_write  (n4)
// Workgroup 256 threads; a grid-stride loop over n4, so any number of
// workgroups covers the buffer.

@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;

@compute @workgroup_size(256)
fn copy(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let stride = groups.x * 256u;
    let n = arrayLength(&src);
    for (var i = gid.x; i < n; i += stride) {
        dst[i] = src[i];
    }
}
