# The test as it ran on the H200 (tests/test_cycle.py at the time; its imports are that file's).
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU"))])
@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_an_evaluation_in_large_batches_gives_every_sample_the_same_logits(precision, device):
    from trainables.cycle import EVAL_ELEMENTS, eval_batch, forward_autocast

    samples = 3000 if device == "cpu" else 30_000
    spec = dataclasses.replace(PRESETS["mnist1d-mlp"].spec, precision=precision, num_samples=samples)
    data = load_data(spec)
    assert eval_batch(spec, data) == EVAL_ELEMENTS // 40 == 3276
    assert eval_batch(dataclasses.replace(spec, batch_size=4096), data) == 4096
    torch.manual_seed(0)
    model = build_model(spec.model, data.input_shape, data.num_classes).to(device).eval()
    large_batch = min(eval_batch(spec, data), data.size("val") // 2)  # two batches at least, the last one partial
    with torch.no_grad(), forward_autocast(torch.device(device), spec):
        small, large = (torch.cat([model(x.to(device)).float() for x, _ in data.batches("val", n)]).cpu()
                        for n in (512, large_batch))
    assert small.shape == (data.size("val"), 10)
    differ, flips = (small != large).any(1), small.argmax(1) != large.argmax(1)
    assert torch.equal(small, large), (
        f"batch {large_batch} against 512 on {device}: {int(differ.sum())} of {len(small)} samples' logits differ "
        f"(at most {float((small - large).abs().max()):.3g}), {int(flips.sum())} predicted classes")
