//! The streaming loader's throughput on a folder of JPEGs: images decoded and cut to one random
//! resized crop (and flipped half the time, as torchvision's side does) per second, the time to
//! the first batch, and the process's peak resident memory.
//!
//! ```text
//! python3 benches/pytorch/make_jpegs.py /tmp/jpegs --images 2000
//! cargo bench --bench stream_loader -- /tmp/jpegs --size 224 --workers 1 --images 2000
//! ```
//! One line of JSON per run. The torchvision counterpart (ImageFolder + RandomResizedCrop +
//! RandomHorizontalFlip + PILToTensor through a DataLoader) is `benches/pytorch/stream_loader.py`;
//! the numbers side by side are in benches/README.md ("Streaming image loader").
//!
//! A folder of WebDataset shards (`recipe pack`'s train/) is read as shards, through a shuffle
//! buffer of `--buffer` samples (default 2,000); the Python side reads it with `webdataset`.

use std::time::Instant;

use curriculum_ssl::augment::crop::RandomResizedCrop;
use curriculum_ssl::data::stream::{
    ImageFiles, ImageSource, Shards, StreamConfig, StreamLoader, ViewCrop,
};
use curriculum_ssl::data::LoaderConfig;

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} takes a number, got {v}"))
        })
        .unwrap_or(default)
}

/// Peak resident memory of this process (`VmHWM`), in MiB.
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(root) = args.first().filter(|a| !a.starts_with('-')) else {
        eprintln!(
            "usage: stream_loader FOLDER [--size 224] [--workers 1] [--images N] [--batch 64] \
             [--views 1] [--buffer 2000]"
        );
        std::process::exit(2);
    };
    let size = arg(&args, "--size", 224);
    let workers = arg(&args, "--workers", 1);
    let batch = arg(&args, "--batch", 64);
    // Views cut from every decoded image (two: a contrastive method's pair).
    let views = arg(&args, "--views", 1).max(1);
    let t0 = Instant::now();
    let shards = std::fs::read_dir(root.as_str())
        .expect("a folder")
        .flatten()
        .any(|e| e.path().extension().is_some_and(|x| x == "tar"));
    let files: Box<dyn ImageSource> = if shards {
        let buffer = arg(&args, "--buffer", 2000);
        Box::new(
            Shards::open(root.as_str())
                .expect("a folder of shards")
                .with_shuffle_buffer(buffer),
        )
    } else {
        Box::new(ImageFiles::classes(root.as_str()).expect("a folder of class folders"))
    };
    let images = arg(&args, "--images", files.len()).min(files.len());
    let config = StreamConfig {
        loader: LoaderConfig {
            batch_size: batch,
            shuffle: true,
            drop_last: true,
            workers,
            prefetch: 2,
            seed: 0,
        },
        channels: 3,
        views: vec![ViewCrop::Random(RandomResizedCrop::new(size)); views],
    };
    let loader = StreamLoader::new(files, config).expect("valid settings");
    let batches = images / batch;
    let mut first = None;
    let mut seen = 0usize;
    let mut checksum = 0u64;
    let start = Instant::now();
    for b in loader.epoch(0, None, 0).take(batches) {
        let b = b.expect("readable data");
        if first.is_none() {
            first = Some(t0.elapsed().as_secs_f64());
        }
        // The flip torchvision's side applies (half the images, mirrored in place).
        let view = &b.views[0];
        let row = view.width * b.channels;
        let mut pixels = view.pixels.clone();
        for (i, image) in pixels.chunks_mut(view.height * row).enumerate() {
            if (b.indices[i] + seen).is_multiple_of(2) {
                for r in image.chunks_mut(row) {
                    let (w, c) = (view.width, b.channels);
                    for x in 0..w / 2 {
                        for k in 0..c {
                            r.swap(x * c + k, (w - 1 - x) * c + k);
                        }
                    }
                }
            }
        }
        checksum = checksum.wrapping_add(pixels.iter().map(|&p| p as u64).sum::<u64>());
        seen += b.len;
    }
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "{{\"side\": \"curriculum-ssl\", \"shards\": {shards}, \"size\": {size}, \"workers\": {workers}, \"images\": {seen}, \
         \"images_per_s\": {:.1}, \"first_batch_s\": {:.3}, \"peak_rss_mib\": {:.1}, \"checksum\": {checksum}}}",
        seen as f64 / seconds,
        first.unwrap_or(f64::NAN),
        peak_rss_mib()
    );
}
