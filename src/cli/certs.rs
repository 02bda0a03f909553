//! `stateful-admission certs generate`.

use std::process::ExitCode;

use super::CertsGenerateArgs;
use crate::certs;

/// `stateful-admission certs generate`: a CA and a serving certificate for local development.
pub fn generate(args: CertsGenerateArgs) -> ExitCode {
    if args.ca_days < 1 || args.days < 1 || args.days > args.ca_days {
        eprintln!("error: need 1 <= --days <= --ca-days");
        return ExitCode::from(2);
    }
    let names = certs::service_dns_names(&args.service, &args.namespace);
    let written = certs::generate(&args.service, &names, args.ca_days, args.days)
        .and_then(|generated| generated.write(&args.out, args.with_ca_key));
    match written {
        Ok(paths) => {
            println!("CA certificate:      {}", paths.ca_cert.display());
            println!("serving certificate: {}", paths.cert.display());
            println!("serving key:         {}", paths.key.display());
            println!("DNS names:           {}", names.join(", "));
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
