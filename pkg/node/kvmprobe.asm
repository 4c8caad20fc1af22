; The KVM probe's guest: a boot sector that walks the CPU through what
; every Linux guest needs before its first line of output, and reports each
; step on the serial port (COM1, 0x3f8):
;
;   R  real mode reached (the firmware ran and loaded us)
;   I  two timer interrupts delivered (PIT through the PIC, ~110 ms)
;   P  protected mode with a flat GDT
;   L  long mode with paging (PAE page tables, EFER.LME, CR0.PG)
;   M  32 MiB touched one page at a time (guest page faults and the host's
;      second-level paging, where a nested "KVM" without hardware support
;      is slowest)
;
; then writes 0x2a to isa-debug-exit (port 0xf4), which QEMU turns into its
; exit status (0x2a << 1) | 1 = 85.
;
; pkg/node embeds the assembled bytes (kvmprobe.bin); TestProbePayload
; checks that `nasm -f bin kvmprobe.asm` still gives them.
bits 16
org 0x7c00
start:
  cli
  xor ax, ax
  mov ds, ax
  mov es, ax
  mov ss, ax
  mov sp, 0x7c00
  mov dx, 0x3f8
  mov al, 'R'
  out dx, al
  mov bx, [0x46c]          ; the BIOS tick count
  sti
.tick:
  hlt
  mov ax, [0x46c]
  sub ax, bx
  cmp ax, 2
  jb .tick
  cli
  mov al, 'I'
  out dx, al
  in al, 0x92              ; fast A20
  or al, 2
  out 0x92, al
  lgdt [gdt_desc]
  mov eax, cr0
  or eax, 1
  mov cr0, eax
  jmp 0x08:pm32
bits 32
pm32:
  mov ax, 0x10
  mov ds, ax
  mov es, ax
  mov ss, ax
  mov esp, 0x7c00
  mov dx, 0x3f8
  mov al, 'P'
  out dx, al
  mov edi, 0x1000          ; PML4 0x1000, PDPT 0x2000, PD 0x3000
  xor eax, eax
  mov ecx, 0xc00
  rep stosd
  mov dword [0x1000], 0x2003
  mov dword [0x2000], 0x3003
  mov edi, 0x3000          ; identity-map 128 MiB with 2 MiB pages
  mov eax, 0x83
  mov ecx, 64
.pd:
  mov dword [edi], eax
  add eax, 0x200000
  add edi, 8
  loop .pd
  mov eax, cr4
  or eax, 0x20             ; PAE
  mov cr4, eax
  mov eax, 0x1000
  mov cr3, eax
  mov ecx, 0xc0000080      ; EFER
  rdmsr
  or eax, 0x100            ; LME
  wrmsr
  mov eax, cr0
  or eax, 0x80000000       ; PG
  mov cr0, eax
  jmp 0x18:lm64
bits 64
lm64:
  mov dx, 0x3f8
  mov al, 'L'
  out dx, al
  mov rdi, 0x400000        ; 4 MiB .. 36 MiB, one write per 4 KiB page
  mov rcx, 0x2000
.touch:
  mov qword [rdi], rcx
  add rdi, 0x1000
  dec rcx
  jnz .touch
  mov al, 'M'
  out dx, al
  mov dx, 0xf4
  mov al, 0x2a
  out dx, al
.halt:
  hlt
  jmp .halt
align 8
gdt:
  dq 0
  dq 0x00cf9a000000ffff    ; 0x08: 32-bit code
  dq 0x00cf92000000ffff    ; 0x10: data
  dq 0x00af9a000000ffff    ; 0x18: 64-bit code
gdt_desc:
  dw gdt_desc - gdt - 1
  dd gdt
times 510-($-$$) db 0
dw 0xaa55
