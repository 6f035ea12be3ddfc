# torch reference for exact search on the GPU: fp32 matmul (TF32 off) + topk.
import torch, time, json, sys
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda"
n, d = 1_000_000, 384
g = torch.Generator(device=dev).manual_seed(1)
base = torch.nn.functional.normalize(torch.randn(n, d, device=dev, generator=g), dim=1)
out = []
for nq in (1, 100, 10_000):
    q = torch.nn.functional.normalize(torch.randn(nq, d, device=dev, generator=g), dim=1)
    for k in (10, 100):
        bs = 2048
        def run():
            res = []
            for i in range(0, nq, bs):
                s = q[i:i + bs] @ base.T
                res.append(torch.topk(s, k, dim=1))
            return res
        run(); torch.cuda.synchronize()
        reps = 3 if nq >= 10_000 else 20
        t = time.perf_counter()
        for _ in range(reps):
            run()
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t) / reps
        tflops = 2 * nq * n * d / dt / 1e12
        # matmul alone
        t = time.perf_counter()
        for _ in range(reps):
            for i in range(0, nq, bs):
                s = q[i:i + bs] @ base.T
        torch.cuda.synchronize()
        dm = (time.perf_counter() - t) / reps
        r = dict(nq=nq, k=k, seconds=dt, tflops=tflops, matmul_only_tflops=2 * nq * n * d / dm / 1e12)
        print(json.dumps(r), flush=True)
        out.append(r)
