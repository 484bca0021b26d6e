//! `svcd demo-data DIR`.

use std::path::Path;
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressStyle};

pub(crate) fn run(dir: &Path) -> anyhow::Result<ExitCode> {
    let bar = ProgressBar::new(0).with_style(
        ProgressStyle::with_template("writing {bar:30} {pos}/{len} files")
            .expect("template is valid"),
    );
    let summary = svc_daemon::write_demo_tree(dir, &mut |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })
    .map_err(|e| anyhow::anyhow!(e))?;
    bar.finish_and_clear();
    println!(
        "wrote {} NetCDF files ({} datasets, {} bytes) below {}",
        summary.files,
        summary.datasets,
        summary.bytes,
        dir.display()
    );
    Ok(ExitCode::SUCCESS)
}
